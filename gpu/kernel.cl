// weightfs bytewise diff, OpenCL C 1.2.
//
// Finds the elements (W bytes wide, W in 1, 2, 4, 8) that differ between base and cur and
// writes their indices and new values in ascending order, exactly as the CPU reference does.
// Three kernels run per chunk of n bytes (n a multiple of W):
//
//   count_changes    one work-group per tile of TILE_BYTES bytes: how many elements changed
//   scan_counts      one work-group: exclusive prefix sum of the tile counts -> offsets, with
//                    the chunk's total in offsets[groups]
//   scatter_changes  one work-group per tile again: each work-item writes its changes at
//                    offsets[tile] + (changes of the work-items before it in the tile)
//
// A work-item owns ITEM_BYTES contiguous bytes and walks them in ascending order, work-items
// of a tile own consecutive ranges and tiles are consecutive, so the scatter reproduces the
// ascending order without any sorting. Bytes are compared 16 at a time (one uint4); only a
// 16-byte block that differs is examined element by element, which is the rare case on RL
// checkpoints (~2% of elements change). Comparisons are bitwise on unsigned integers, never on
// floats, so NaN payloads and -0 are exact.
//
// Build options: -DWG=<work-group size, a power of two> -DITEM_BYTES=<multiple of 16>.
// Buffers must start 16-byte aligned (OpenCL buffers are) and n must be below 2^32 - TILE_BYTES.

#ifndef WG
#error "build with -DWG=<work-group size>"
#endif
#ifndef ITEM_BYTES
#error "build with -DITEM_BYTES=<bytes per work-item>"
#endif
#define TILE_BYTES ((uint)(WG) * (uint)(ITEM_BYTES))

// Exclusive prefix sum of v over the work-group (Hillis-Steele in local memory). Every
// work-item of the group must call it. *total receives the sum over the whole group.
uint group_exclusive_scan(uint v, __local uint *tmp, uint *total) {
    uint lid = get_local_id(0);
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < WG; off <<= 1) {
        uint add = lid >= off ? tmp[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint inclusive = tmp[lid];
    *total = tmp[WG - 1];
    barrier(CLK_LOCAL_MEM_FENCE); // tmp may be reused by the caller
    return inclusive - v;
}

// Changed elements in bytes [p, e) of the chunk; p and e are multiples of w.
uint count_range(const __global uchar *a, const __global uchar *b, uint p, uint e, uint w) {
    uint c = 0;
    switch (w) {
    case 1:
        for (uint i = p; i < e; i++) c += a[i] != b[i];
        break;
    case 2: {
        const __global ushort *x = (const __global ushort *)a, *y = (const __global ushort *)b;
        for (uint i = p / 2; i < e / 2; i++) c += x[i] != y[i];
        break;
    }
    case 4: {
        const __global uint *x = (const __global uint *)a, *y = (const __global uint *)b;
        for (uint i = p / 4; i < e / 4; i++) c += x[i] != y[i];
        break;
    }
    default: {
        const __global ulong *x = (const __global ulong *)a, *y = (const __global ulong *)b;
        for (uint i = p / 8; i < e / 8; i++) c += x[i] != y[i];
        break;
    }
    }
    return c;
}

// Writes the changed elements of bytes [p, e) at idx/vals[*o...], advancing *o. The index
// written is first + the element's index in the chunk.
void emit_range(const __global uchar *a, const __global uchar *b, uint p, uint e, uint w,
                uint first, __global uint *idx, __global uchar *vals, uint *o) {
    switch (w) {
    case 1:
        for (uint i = p; i < e; i++) {
            if (a[i] != b[i]) { idx[*o] = first + i; vals[*o] = b[i]; (*o)++; }
        }
        break;
    case 2: {
        const __global ushort *x = (const __global ushort *)a, *y = (const __global ushort *)b;
        __global ushort *v = (__global ushort *)vals;
        for (uint i = p / 2; i < e / 2; i++) {
            if (x[i] != y[i]) { idx[*o] = first + i; v[*o] = y[i]; (*o)++; }
        }
        break;
    }
    case 4: {
        const __global uint *x = (const __global uint *)a, *y = (const __global uint *)b;
        __global uint *v = (__global uint *)vals;
        for (uint i = p / 4; i < e / 4; i++) {
            if (x[i] != y[i]) { idx[*o] = first + i; v[*o] = y[i]; (*o)++; }
        }
        break;
    }
    default: {
        const __global ulong *x = (const __global ulong *)a, *y = (const __global ulong *)b;
        __global ulong *v = (__global ulong *)vals;
        for (uint i = p / 8; i < e / 8; i++) {
            if (x[i] != y[i]) { idx[*o] = first + i; v[*o] = y[i]; (*o)++; }
        }
        break;
    }
    }
}

// True when the 16 bytes at p differ anywhere.
bool block_differs(const __global uchar *a, const __global uchar *b, uint p) {
    uint4 x = vload4(0, (const __global uint *)(a + p));
    uint4 y = vload4(0, (const __global uint *)(b + p));
    return any(x != y);
}

// Changed elements in the work-item's bytes [start, min(start + ITEM_BYTES, n)).
uint count_item(const __global uchar *a, const __global uchar *b, uint start, uint n, uint w) {
    if (start >= n) return 0;
    uint e = min(start + (uint)ITEM_BYTES, n);
    uint c = 0, p = start;
    for (; p + 16 <= e; p += 16) {
        if (block_differs(a, b, p)) c += count_range(a, b, p, p + 16, w);
    }
    if (p < e) c += count_range(a, b, p, e, w); // the chunk's unaligned tail
    return c;
}

// Writes the changes of the same bytes count_item counted, in ascending order.
void emit_item(const __global uchar *a, const __global uchar *b, uint start, uint n, uint w,
               uint first, __global uint *idx, __global uchar *vals, uint o) {
    uint e = min(start + (uint)ITEM_BYTES, n);
    uint p = start;
    for (; p + 16 <= e; p += 16) {
        if (block_differs(a, b, p)) emit_range(a, b, p, p + 16, w, first, idx, vals, &o);
    }
    if (p < e) emit_range(a, b, p, e, w, first, idx, vals, &o);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void count_changes(const __global uchar *base, const __global uchar *cur, uint n, uint w,
                   __global uint *counts) {
    __local uint tmp[WG];
    uint start = get_group_id(0) * TILE_BYTES + get_local_id(0) * (uint)ITEM_BYTES;
    uint total;
    group_exclusive_scan(count_item(base, cur, start, n, w), tmp, &total);
    if (get_local_id(0) == 0) counts[get_group_id(0)] = total;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan_counts(const __global uint *counts, uint groups, __global uint *offsets) {
    __local uint tmp[WG];
    uint lid = get_local_id(0);
    uint per = (groups + WG - 1) / WG;
    uint lo = min(lid * per, groups), hi = min(lo + per, groups);
    uint sum = 0;
    for (uint i = lo; i < hi; i++) sum += counts[i];
    uint total;
    uint run = group_exclusive_scan(sum, tmp, &total);
    for (uint i = lo; i < hi; i++) {
        offsets[i] = run;
        run += counts[i];
    }
    if (lid == 0) offsets[groups] = total;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scatter_changes(const __global uchar *base, const __global uchar *cur, uint n, uint w,
                     uint first, const __global uint *offsets, __global uint *idx,
                     __global uchar *vals) {
    __local uint tmp[WG];
    uint g = get_group_id(0);
    uint begin = offsets[g];
    if (offsets[g + 1] == begin) return; // nothing changed in this tile: the whole group leaves
    uint start = g * TILE_BYTES + get_local_id(0) * (uint)ITEM_BYTES;
    uint c = count_item(base, cur, start, n, w);
    uint total;
    uint o = begin + group_exclusive_scan(c, tmp, &total);
    if (c != 0) emit_item(base, cur, start, n, w, first, idx, vals, o);
}
