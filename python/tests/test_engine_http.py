"""The swap over HTTP: weightfs.engine.VLLMHTTPEngine against a local server (stdlib
http.server on 127.0.0.1) that answers vLLM's dev-mode routes as
vllm/entrypoints/serve/dev/rlhf/api_router.py defines them (bodies and replies mirrored, no
code copied) and holds the two-rank fused model of vllm_tp_mirror.py. The data plane (NCCL in
vLLM) is a queue: the engine's send() puts a chunk, /update_weights takes it and checks that
the update_info it was sent describes that chunk."""

import json
import threading
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fixtures  # first: it finds the weightfs package when it is not installed
import weightfs

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import vllm_tp_mirror as mirror
    from weightfs import engine as we
    from weightfs import weightcheck as wc
    from weightfs.vllm import update_info
    from test_engine import QKV_RANK1, config_of, flip_k_rank1


class FakeVLLM:
    def __init__(self, model, paused_checker_409=False, dev_mode=True):
        self.model, self.paused, self.version = model, False, None
        self.pending, self.log = [], []
        # The data plane: /update_weights waits for its chunk as a worker's NCCL receive
        # does, since the engine posts it from a thread while it sends.
        self.arrived = threading.Condition()
        self.paused_checker_409, self.dev_mode = paused_checker_409, dev_mode
        self.corrupt = None

    def send(self, chunk):
        with self.arrived:
            self.pending.append(chunk)
            self.arrived.notify_all()

    def handle(self, method, path, body):
        u = urllib.parse.urlparse(path)
        route, query = u.path, urllib.parse.parse_qs(u.query)
        self.log.append((method, path, body))
        if not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if (method, route) == ("POST", "/pause"):
            if query.get("mode", ["abort"])[0] not in ("abort", "wait", "keep"):
                return 400, {"error": "bad mode"}
            self.paused = True
            return 200, {"status": "paused"}
        if (method, route) == ("POST", "/resume"):
            self.paused = False
            return 200, {"status": "resumed"}
        if (method, route) == ("GET", "/is_paused"):
            return 200, {"is_paused": self.paused}
        if (method, route) == ("GET", "/get_world_size"):
            return 200, {"world_size": len(self.model.ranks)}
        if (method, route) == ("POST", "/start_weight_update"):
            return 200, {"message": "Weight update started"}
        if (method, route) == ("POST", "/update_weights"):
            if "update_info" not in body:
                return 400, {"detail": "Missing 'update_info' in request body"}
            with self.arrived:
                if not self.arrived.wait_for(lambda: self.pending, timeout=120):
                    return 500, {"detail": "receive timed out"}
                chunk = self.pending.pop(0)
            if body["update_info"] != update_info(chunk):
                return 500, {"detail": "update_info does not describe the chunk received"}
            self.model.apply_chunk(chunk)
            if self.corrupt:
                self.corrupt(self.model)
                self.corrupt = None
            return 200, {"message": "Weights updated"}
        if (method, route) == ("POST", "/finish_weight_update"):
            self.version = body.get("weight_version")
            return 200, {"message": "Weight update finished"}
        if (method, route) == ("GET", "/weight_info"):
            return 200, {"weight_version": self.version}
        if (method, route) == ("POST", "/weight_checker"):
            if self.paused and self.paused_checker_409:
                return 409, {"detail": "weight_checker requires an awake, unpaused engine"}
            if body.get("action") != "checksum":
                return 400, {"detail": "action"}
            return 200, {"checksums": self.model.checksums()}
        return 404, {"detail": "Not Found"}


def serve(fake):
    class H(BaseHTTPRequestHandler):
        def _do(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else {}
            code, reply = fake.handle(method, self.path, body)
            raw = json.dumps(reply).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            self._do("GET")

        def do_POST(self):
            self._do("POST")

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class HTTPSwap(unittest.TestCase):
    def setUp(self):
        self.store = fixtures.rl_store()
        self.cfg = config_of(self.store)
        self.layout = wc.FusedLayout.from_config(self.cfg, tp=2)

    def start(self, v, **kw):
        model = mirror.TPModel(self.cfg, 2)
        model.load_dense(self.store.torch_state(v))
        fake = FakeVLLM(model, **kw)
        srv, url = serve(fake)
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return fake, we.VLLMHTTPEngine(url, send=fake.send, timeout=60)

    def staged(self, v, expected):
        return we.stage(weightfs.Patch.open(self.store.patch(v)), held=v - 1, max_bytes=600, expected=expected)

    def test_versions_over_http(self):
        fake, eng = self.start(1)
        self.assertEqual(eng.world_size(), 3)  # the trainer + 2 inference ranks
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        for v in (2, 3, 4):
            fake.log.clear()
            s = self.staged(v, expected)
            rep = we.swap(eng, s)
            routes = [(m, p) for m, p, _ in fake.log]
            k = len(s.chunks)
            self.assertEqual(routes, [("POST", "/pause?mode=keep"), ("POST", "/start_weight_update")] +
                             [("POST", "/update_weights")] * k +
                             [("POST", "/finish_weight_update"), ("GET", "/weight_info"),
                              ("POST", "/weight_checker"), ("POST", "/resume")])
            self.assertEqual(fake.log[1][2], {"is_checkpoint_format": True})
            self.assertEqual(fake.log[2 + k][2], {"weight_version": str(v)})
            self.assertEqual(fake.log[4 + k][2], {"action": "checksum"})
            self.assertFalse(fake.paused)
            self.assertEqual(fake.version, str(v))
            self.assertEqual(rep.verified, 18)
            self.assertEqual(fake.pending, [])
        wc.compare_digests(self.layout.digests(self.store.numpy_state(4, raw=True)), fake.model.checksums())

    def test_with_vllm_trainer_engine(self):
        """use_trainer: vLLM's trainer engine posts /update_weights itself, through this
        object as its client, while it broadcasts (SparseNCCLTrainerWeightTransferEngine.
        _broadcast_chunk); the swap then only calls send_weight_chunk."""
        fake, eng = self.start(1)

        class Trainer:  # the data plane of _broadcast_chunk: info over the client, tensors to the ranks
            def __init__(self, client):
                self.client, self.sent = client, 0

            def send_weight_chunk(self, patches):
                fake.send(patches)
                self.client.update_weights(update_info(patches))
                self.sent += 1
        trainer = Trainer(eng)
        eng.use_trainer(trainer)
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        s = self.staged(2, expected)
        rep = we.swap(eng, s)
        self.assertEqual(trainer.sent, len(s.chunks))
        self.assertEqual([p for _, p, _ in fake.log].count("/update_weights"), len(s.chunks))
        self.assertEqual((fake.version, rep.verified), ("2", 18))

    def test_flipped_element_over_http(self):
        fake, eng = self.start(1)
        fake.corrupt = flip_k_rank1
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(eng, self.staged(2, expected))
        self.assertEqual(cm.exception.cause.key, QKV_RANK1)
        self.assertTrue(fake.paused)
        self.assertNotIn("/resume", [p for _, p, _ in fake.log])

    def test_checker_refusing_while_paused(self):
        fake, eng = self.start(1, paused_checker_409=True)
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(eng, self.staged(2, expected))
        self.assertEqual((cm.exception.step, cm.exception.state), ("verify", "unproven"))
        self.assertIn("HTTP 409", str(cm.exception))
        self.assertIn("refuses while paused", str(cm.exception))
        self.assertTrue(fake.paused)

    def test_no_dev_mode(self):
        fake, eng = self.start(1, dev_mode=False)
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(eng, self.staged(2, expected))
        self.assertEqual((cm.exception.step, cm.exception.paused), ("pause", False))
        self.assertIn("VLLM_SERVER_DEV_MODE=1", str(cm.exception))

    def test_update_failure_mid_swap(self):
        fake, eng = self.start(1)
        expected = wc.ExpectedDigests.from_version_dir(self.layout, 1, self.store.versions[1])
        s = self.staged(2, expected)
        eng.send = lambda chunk: None  # the data plane loses the chunk: the server has nothing to load
        fake.pending = []
        real = fake.handle

        def handle(method, path, body):
            if path == "/update_weights" and not fake.pending:
                fake.log.append((method, path, body))
                return 500, {"detail": "receive timed out"}
            return real(method, path, body)
        fake.handle = handle
        with self.assertRaises(we.SwapFailed) as cm:
            we.swap(eng, s)
        self.assertEqual((cm.exception.step, cm.exception.state), ("apply", "mixed"))
        self.assertIn("HTTP 500", str(cm.exception))
        self.assertTrue(fake.paused)
        self.assertNotIn("/resume", [p for _, p, _ in fake.log])


if __name__ == "__main__":
    unittest.main()
