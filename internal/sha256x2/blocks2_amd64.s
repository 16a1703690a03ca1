//go:build amd64 && !purego

#include "textflag.h"

// Two SHA-256 streams, interleaved, with the SHA extensions (SHA-NI). SHA256RNDS2 does two
// rounds of one stream, and its latency bounds a single stream; two independent streams
// issued side by side fill each other's waits (up to the instruction's throughput). The
// rounds and the message schedule follow Intel's description of the extensions (ABEF/CDGH
// state layout, four message words per register); see sha256x2.go for the Go side.
//
// Registers: X0 is the implicit operand of SHA256RNDS2 (message words plus constants).
// Stream A: state X1 (ABEF), X2 (CDGH), message X3-X6, scratch X13.
// Stream B: state X7 (ABEF), X8 (CDGH), message X9-X12, scratch X14.
// X15 holds the byte-swap mask. The states at the start of a block are kept on the stack.

// TOLANES turns S1 = h0..h3, S2 = h4..h7 into S1 = ABEF, S2 = CDGH.
#define TOLANES(S1, S2, T) \
	PSHUFD  $0xb1, S1, S1; \
	PSHUFD  $0x1b, S2, S2; \
	MOVO    S1, T; \
	PALIGNR $8, S2, S1; \
	PBLENDW $0xf0, T, S2

// FROMLANES undoes TOLANES.
#define FROMLANES(S1, S2, T) \
	PSHUFD  $0x1b, S1, S1; \
	PSHUFD  $0xb1, S2, S2; \
	MOVO    S1, T; \
	PBLENDW $0xf0, S2, S1; \
	PALIGNR $8, T, S2

// LOADMSG loads four message words from mem, big-endian.
#define LOADMSG(mem, M) \
	MOVOU  mem, M; \
	PSHUFB X15, M

// QROUND does four rounds with message words M and constants at koff in the table (AX). The
// second pair of words reaches X0 through the stream's stack slot (a store and a load)
// rather than a PSHUFD: measured 1.05 against 1.00 GB/s (BenchmarkWriteBoth).
#define QROUND(M, S1, S2, T, koff, slot) \
	MOVOU       koff(AX), T; \
	PADDD       M, T; \
	MOVOU       T, slot(SP); \
	MOVO        T, X0; \
	SHA256RNDS2 X0, S1, S2; \
	MOVQ        slot+8(SP), X0; \
	SHA256RNDS2 X0, S2, S1

// SCHED computes the next four message words into M4, which holds the words of four groups
// back; M3, M2 and M1 hold those of three, two and one group back.
#define SCHED(M4, M3, M2, M1, T) \
	SHA256MSG1 M3, M4; \
	MOVO       M1, T; \
	PALIGNR    $4, M2, T; \
	PADDD      T, M4; \
	SHA256MSG2 M1, M4

// func blocks2(ha *[8]uint32, pa *byte, hb *[8]uint32, pb *byte, n int)
TEXT ·blocks2(SB), NOSPLIT, $96-40
	MOVQ  ha+0(FP), DI
	MOVQ  pa+8(FP), SI
	MOVQ  hb+16(FP), R8
	MOVQ  pb+24(FP), R9
	MOVQ  n+32(FP), DX
	TESTQ DX, DX
	JZ    done
	LEAQ  k256<>(SB), AX
	MOVOU flip<>(SB), X15
	MOVOU (DI), X1
	MOVOU 16(DI), X2
	TOLANES(X1, X2, X13)
	MOVOU (R8), X7
	MOVOU 16(R8), X8
	TOLANES(X7, X8, X14)

block:
	MOVOU X1, 0(SP)
	MOVOU X2, 16(SP)
	MOVOU X7, 32(SP)
	MOVOU X8, 48(SP)
	LOADMSG(0(SI), X3)
	LOADMSG(16(SI), X4)
	LOADMSG(32(SI), X5)
	LOADMSG(48(SI), X6)
	LOADMSG(0(R9), X9)
	LOADMSG(16(R9), X10)
	LOADMSG(32(R9), X11)
	LOADMSG(48(R9), X12)
	QROUND(X3, X1, X2, X13, 0, 64)
	QROUND(X9, X7, X8, X14, 0, 80)
	QROUND(X4, X1, X2, X13, 16, 64)
	QROUND(X10, X7, X8, X14, 16, 80)
	QROUND(X5, X1, X2, X13, 32, 64)
	QROUND(X11, X7, X8, X14, 32, 80)
	QROUND(X6, X1, X2, X13, 48, 64)
	QROUND(X12, X7, X8, X14, 48, 80)
	SCHED(X3, X4, X5, X6, X13)
	QROUND(X3, X1, X2, X13, 64, 64)
	SCHED(X9, X10, X11, X12, X14)
	QROUND(X9, X7, X8, X14, 64, 80)
	SCHED(X4, X5, X6, X3, X13)
	QROUND(X4, X1, X2, X13, 80, 64)
	SCHED(X10, X11, X12, X9, X14)
	QROUND(X10, X7, X8, X14, 80, 80)
	SCHED(X5, X6, X3, X4, X13)
	QROUND(X5, X1, X2, X13, 96, 64)
	SCHED(X11, X12, X9, X10, X14)
	QROUND(X11, X7, X8, X14, 96, 80)
	SCHED(X6, X3, X4, X5, X13)
	QROUND(X6, X1, X2, X13, 112, 64)
	SCHED(X12, X9, X10, X11, X14)
	QROUND(X12, X7, X8, X14, 112, 80)
	SCHED(X3, X4, X5, X6, X13)
	QROUND(X3, X1, X2, X13, 128, 64)
	SCHED(X9, X10, X11, X12, X14)
	QROUND(X9, X7, X8, X14, 128, 80)
	SCHED(X4, X5, X6, X3, X13)
	QROUND(X4, X1, X2, X13, 144, 64)
	SCHED(X10, X11, X12, X9, X14)
	QROUND(X10, X7, X8, X14, 144, 80)
	SCHED(X5, X6, X3, X4, X13)
	QROUND(X5, X1, X2, X13, 160, 64)
	SCHED(X11, X12, X9, X10, X14)
	QROUND(X11, X7, X8, X14, 160, 80)
	SCHED(X6, X3, X4, X5, X13)
	QROUND(X6, X1, X2, X13, 176, 64)
	SCHED(X12, X9, X10, X11, X14)
	QROUND(X12, X7, X8, X14, 176, 80)
	SCHED(X3, X4, X5, X6, X13)
	QROUND(X3, X1, X2, X13, 192, 64)
	SCHED(X9, X10, X11, X12, X14)
	QROUND(X9, X7, X8, X14, 192, 80)
	SCHED(X4, X5, X6, X3, X13)
	QROUND(X4, X1, X2, X13, 208, 64)
	SCHED(X10, X11, X12, X9, X14)
	QROUND(X10, X7, X8, X14, 208, 80)
	SCHED(X5, X6, X3, X4, X13)
	QROUND(X5, X1, X2, X13, 224, 64)
	SCHED(X11, X12, X9, X10, X14)
	QROUND(X11, X7, X8, X14, 224, 80)
	SCHED(X6, X3, X4, X5, X13)
	QROUND(X6, X1, X2, X13, 240, 64)
	SCHED(X12, X9, X10, X11, X14)
	QROUND(X12, X7, X8, X14, 240, 80)

	MOVOU 0(SP), X13
	PADDD X13, X1
	MOVOU 16(SP), X13
	PADDD X13, X2
	MOVOU 32(SP), X14
	PADDD X14, X7
	MOVOU 48(SP), X14
	PADDD X14, X8
	ADDQ  $64, SI
	ADDQ  $64, R9
	DECQ  DX
	JNZ   block

	FROMLANES(X1, X2, X13)
	MOVOU X1, (DI)
	MOVOU X2, 16(DI)
	FROMLANES(X7, X8, X14)
	MOVOU X7, (R8)
	MOVOU X8, 16(R8)

done:
	RET

// func cpuidSHA() bool: CPUID leaf 7, EBX bit 29.
TEXT ·cpuidSHA(SB), NOSPLIT, $0-1
	MOVL    $7, AX
	XORL    CX, CX
	CPUID
	SHRL    $29, BX
	ANDL    $1, BX
	MOVB    BX, ret+0(FP)
	RET

DATA k256<>+0x00(SB)/4, $0x428a2f98
DATA k256<>+0x04(SB)/4, $0x71374491
DATA k256<>+0x08(SB)/4, $0xb5c0fbcf
DATA k256<>+0x0c(SB)/4, $0xe9b5dba5
DATA k256<>+0x10(SB)/4, $0x3956c25b
DATA k256<>+0x14(SB)/4, $0x59f111f1
DATA k256<>+0x18(SB)/4, $0x923f82a4
DATA k256<>+0x1c(SB)/4, $0xab1c5ed5
DATA k256<>+0x20(SB)/4, $0xd807aa98
DATA k256<>+0x24(SB)/4, $0x12835b01
DATA k256<>+0x28(SB)/4, $0x243185be
DATA k256<>+0x2c(SB)/4, $0x550c7dc3
DATA k256<>+0x30(SB)/4, $0x72be5d74
DATA k256<>+0x34(SB)/4, $0x80deb1fe
DATA k256<>+0x38(SB)/4, $0x9bdc06a7
DATA k256<>+0x3c(SB)/4, $0xc19bf174
DATA k256<>+0x40(SB)/4, $0xe49b69c1
DATA k256<>+0x44(SB)/4, $0xefbe4786
DATA k256<>+0x48(SB)/4, $0x0fc19dc6
DATA k256<>+0x4c(SB)/4, $0x240ca1cc
DATA k256<>+0x50(SB)/4, $0x2de92c6f
DATA k256<>+0x54(SB)/4, $0x4a7484aa
DATA k256<>+0x58(SB)/4, $0x5cb0a9dc
DATA k256<>+0x5c(SB)/4, $0x76f988da
DATA k256<>+0x60(SB)/4, $0x983e5152
DATA k256<>+0x64(SB)/4, $0xa831c66d
DATA k256<>+0x68(SB)/4, $0xb00327c8
DATA k256<>+0x6c(SB)/4, $0xbf597fc7
DATA k256<>+0x70(SB)/4, $0xc6e00bf3
DATA k256<>+0x74(SB)/4, $0xd5a79147
DATA k256<>+0x78(SB)/4, $0x06ca6351
DATA k256<>+0x7c(SB)/4, $0x14292967
DATA k256<>+0x80(SB)/4, $0x27b70a85
DATA k256<>+0x84(SB)/4, $0x2e1b2138
DATA k256<>+0x88(SB)/4, $0x4d2c6dfc
DATA k256<>+0x8c(SB)/4, $0x53380d13
DATA k256<>+0x90(SB)/4, $0x650a7354
DATA k256<>+0x94(SB)/4, $0x766a0abb
DATA k256<>+0x98(SB)/4, $0x81c2c92e
DATA k256<>+0x9c(SB)/4, $0x92722c85
DATA k256<>+0xa0(SB)/4, $0xa2bfe8a1
DATA k256<>+0xa4(SB)/4, $0xa81a664b
DATA k256<>+0xa8(SB)/4, $0xc24b8b70
DATA k256<>+0xac(SB)/4, $0xc76c51a3
DATA k256<>+0xb0(SB)/4, $0xd192e819
DATA k256<>+0xb4(SB)/4, $0xd6990624
DATA k256<>+0xb8(SB)/4, $0xf40e3585
DATA k256<>+0xbc(SB)/4, $0x106aa070
DATA k256<>+0xc0(SB)/4, $0x19a4c116
DATA k256<>+0xc4(SB)/4, $0x1e376c08
DATA k256<>+0xc8(SB)/4, $0x2748774c
DATA k256<>+0xcc(SB)/4, $0x34b0bcb5
DATA k256<>+0xd0(SB)/4, $0x391c0cb3
DATA k256<>+0xd4(SB)/4, $0x4ed8aa4a
DATA k256<>+0xd8(SB)/4, $0x5b9cca4f
DATA k256<>+0xdc(SB)/4, $0x682e6ff3
DATA k256<>+0xe0(SB)/4, $0x748f82ee
DATA k256<>+0xe4(SB)/4, $0x78a5636f
DATA k256<>+0xe8(SB)/4, $0x84c87814
DATA k256<>+0xec(SB)/4, $0x8cc70208
DATA k256<>+0xf0(SB)/4, $0x90befffa
DATA k256<>+0xf4(SB)/4, $0xa4506ceb
DATA k256<>+0xf8(SB)/4, $0xbef9a3f7
DATA k256<>+0xfc(SB)/4, $0xc67178f2
GLOBL k256<>(SB), RODATA|NOPTR, $256

DATA flip<>+0(SB)/8, $0x0405060700010203
DATA flip<>+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL flip<>(SB), RODATA|NOPTR, $16
