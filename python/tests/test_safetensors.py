"""The strict safetensors reader (docs/format.md Part III §1), on hand-made files."""

import json
import os
import struct
import tempfile
import unittest

import numpy as np

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs
from weightfs.safetensors import MalformedFile, SafetensorsFile, read_header


def raw_file(header, data, pad=True):
    js = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + data


# The document's example file: BF16 w [2,2] = 1.0 2.0 3.0 4.0.
DOC_BASE = bytes.fromhex("4000000000000000") + b'{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}       ' + \
    bytes.fromhex("803f004040408040")


class Reader(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, b, name="f.safetensors"):
        p = os.path.join(self.dir.name, name)
        with open(p, "wb") as f:
            f.write(b)
        return p

    def test_doc_example(self):
        f = SafetensorsFile(self.write(DOC_BASE))
        self.assertEqual(f.data_start, 72)
        t = f.tensors["w"]
        self.assertEqual((t.dtype.name, t.shape, t.begin, t.end), ("BF16", (2, 2), 0, 8))
        self.assertEqual(f.array("w").tolist(), [[0x3F80, 0x4000], [0x4040, 0x4080]])
        self.assertEqual(weightfs.checkpoint_shapes(self.dir.name), {"w": (2, 2)})

    def test_dtypes_and_views(self):
        a = np.arange(6, dtype="<f4")
        p = self.write(raw_file({"__metadata__": {"k": "v"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                                 "s": {"dtype": "I64", "shape": [], "data_offsets": [24, 32]},
                                 "z": {"dtype": "F16", "shape": [0, 4], "data_offsets": [32, 32]}},
                                a.tobytes() + struct.pack("<q", -3)))
        f = SafetensorsFile(p)
        self.assertEqual(f.metadata, {"k": "v"})
        self.assertEqual(f.array("a").tolist(), a.reshape(2, 3).tolist())
        self.assertEqual(f.array("a", raw=True).dtype, np.dtype("<u4"))
        self.assertEqual(int(f.array("s")), -3)
        self.assertEqual(f.array("z").shape, (0, 4))

    def test_refused(self):
        w = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}
        data = bytes(8)
        cases = {
            "gap": raw_file({"w": dict(w, data_offsets=[2, 10])}, bytes(10)),
            "overlap": raw_file({"w": w, "v": dict(w, data_offsets=[6, 14])}, bytes(14)),
            "short of the end": raw_file({"w": w}, data + b"\0"),
            "past the end": raw_file({"w": dict(w, shape=[2, 3], data_offsets=[0, 12])}, data),
            "size vs shape": raw_file({"w": dict(w, data_offsets=[0, 6])}, bytes(6)),
            "unknown dtype": raw_file({"w": dict(w, dtype="BF17")}, data),
            "negative dim": raw_file({"w": dict(w, shape=[-2, -2])}, data),
            "float dim": raw_file({"w": dict(w, shape=[2.0, 2])}, data),
            "bool dim": raw_file({"w": dict(w, shape=[True, 8], dtype="U8")}, data),
            "extra field": raw_file({"w": dict(w, extra=1)}, data),
            "missing field": raw_file({"w": {"dtype": "BF16", "shape": [4]}}, data),
            "metadata not strings": raw_file({"__metadata__": {"a": 1}, "w": w}, data),
            "duplicate key": raw_file(b'{"w":' + json.dumps(w).encode() + b',"w":' + json.dumps(w).encode() + b"}", data),
            "not an object": raw_file(b"[1]", b""),
            "leading space": raw_file(b' {"w":' + json.dumps(w).encode() + b"}", data),
            "bad utf-8": raw_file(b'{"\xff":' + json.dumps(w).encode() + b"}", data),
            "header too long": struct.pack("<Q", 1 << 40) + b"{}",
            "short": b"\x01\x00",
            "overflow": raw_file({"w": dict(w, shape=[1 << 40, 1 << 40], data_offsets=[0, 8])}, data),
        }
        for what, b in cases.items():
            with self.subTest(what):
                with self.assertRaises(MalformedFile):
                    read_header(self.write(b))


if __name__ == "__main__":
    unittest.main()
