package delta

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// slimeReceiverPy reads a delta directory the way sglang's /pull_weights does (python
// zstandard and xxhash, independent of our Go code): index metadata, every shard's tensors
// listed by the index, one frame per tensor with its content size and nothing after it, the
// overwrite payload, and the xxh3-128 of the new bytes. argv: delta dir, base dir.
const slimeReceiverPy = `
import json, os, struct, sys
import xxhash, zstandard
delta, base_dir = sys.argv[1], sys.argv[2]
def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n, f
index = json.load(open(os.path.join(delta, "model.safetensors.index.json")))
meta = index["metadata"]
assert set(index) == {"metadata", "weight_map"}, index.keys()
assert meta == {"version": "000007", "base_version": "000006", "delta_encoding": "overwrite",
                "compression_format": "zstd", "checksum_format": "xxh3-128"}, meta
assert sorted(os.listdir(delta)) == sorted(["model.safetensors.index.json"] + sorted(set(index["weight_map"].values())))
applied = 0
for shard in sorted(set(index["weight_map"].values())):
    path = os.path.join(delta, shard)
    hdr, start, _ = header(path)
    sums = hdr.pop("__metadata__")
    assert set(sums) == set(hdr), (sums, hdr)
    blob = open(path, "rb").read()
    for name, info in hdr.items():
        assert index["weight_map"][name] == shard
        assert info["dtype"] == "U8" and len(info["shape"]) == 1
        b, e = info["data_offsets"]
        frame = blob[start + b:start + e]
        assert zstandard.frame_content_size(frame) > 0
        d = zstandard.ZstdDecompressor().decompressobj()
        payload = d.decompress(frame)
        assert d.eof and d.unused_data == b"", name
        assert zstandard.frame_content_size(frame) == len(payload)
        (count,) = struct.unpack_from("<I", payload)
        assert len(payload) == 4 + 5 * count
        positions = struct.unpack_from("<%dI" % count, payload, 4)
        new = payload[4 + 4 * count:]
        raw = bytearray(open(os.path.join(base_dir, name), "rb").read())
        for p, v in zip(positions, new):
            raw[p] = v
        assert xxhash.xxh3_128_hexdigest(bytes(raw)) == sums[name], name
        open(os.path.join(base_dir, name), "wb").write(raw)
        applied += 1
print("applied", applied)
`

func TestSlimePythonReceiver(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import xxhash, zstandard").Run(); err != nil {
		t.Skipf("skipping: %s with xxhash and zstandard is not available (%v); install python3-xxhash python3-zstandard", python, err)
	}
	names := []string{"a", "b", "c"}
	base := map[string][]byte{"a": bytes.Repeat([]byte{1, 2, 3}, 100), "b": make([]byte, 5000), "c": {9}}
	cur := map[string][]byte{"a": bytes.Clone(base["a"]), "b": bytes.Clone(base["b"]), "c": {8}}
	cur["a"][7] = 77
	for i := 0; i < 5000; i += 3 {
		cur["b"][i] = byte(i)
	}
	files := slimeTestDelta(t, 7, 1000, names, base, cur)
	dir := t.TempDir()
	deltaDir, baseDir := filepath.Join(dir, "delta"), filepath.Join(dir, "base")
	os.Mkdir(deltaDir, 0o755)
	os.Mkdir(baseDir, 0o755)
	for n, b := range files {
		os.WriteFile(filepath.Join(deltaDir, n), b, 0o644)
	}
	for n, b := range base {
		os.WriteFile(filepath.Join(baseDir, n), b, 0o644)
	}
	out, err := exec.Command(python, "-c", slimeReceiverPy, deltaDir, baseDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "applied 3") {
		t.Fatalf("python receiver: %v\n%s", err, out)
	}
	for _, n := range names {
		got, _ := os.ReadFile(filepath.Join(baseDir, n))
		if !bytes.Equal(got, cur[n]) {
			t.Errorf("tensor %s differs after the python receiver", n)
		}
	}
}
