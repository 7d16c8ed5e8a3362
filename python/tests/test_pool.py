"""Shard pools against a real fenceproxy (plain mode, in front of a Python
backend): claim, hand-back, release, done, and Pool.run."""

import threading
import time
import unittest

try:
    from . import harness
except ImportError:  # run from inside tests/
    import harness  # type: ignore[no-redef]

import fenceproxy
from fenceproxy import errors, transport


def setUpModule():
    global backend, fp
    backend = harness.Backend()
    try:
        fp = harness.Fenceproxy(unittest.TestCase(), "serve", {"FENCEPROXY_UPSTREAM": backend.url})
    except BaseException:
        backend.stop()
        raise


def tearDownModule():
    fp.stop()
    backend.stop()


class TestPool(unittest.TestCase):
    def setUp(self):
        self.leases = fenceproxy.LeaseClient(fp.control_url)

    def test_claim_hand_back_done(self):
        w1 = self.leases.pool("hb", "w1", 10)
        w2 = self.leases.pool("hb", "w2", 10)
        state = w1.define(shards=4)
        self.assertEqual((state["pool"], state["share"], state["open"]), ("hb", 4, 4))
        self.assertEqual([s["state"] for s in state["shards"]], ["free"] * 4)
        mine = [w1.claim() for _ in range(4)]  # its share is 4 while it is alone
        self.assertEqual(sorted(s.shard for s in mine), ["0", "1", "2", "3"])
        for s in mine:
            self.assertEqual((s.pool, s.name, s.lease.holder), ("hb", "hb/" + s.shard, "w1"))
            self.assertIsInstance(s.token, int)
        with self.assertRaises(errors.NoShardError) as cm:
            w1.claim()
        self.assertTrue(cm.exception.at_share)
        self.assertEqual(cm.exception.share, 4)
        # w2 joins and finds none free; it now counts as live
        with self.assertRaises(errors.NoShardError) as cm:
            w2.claim()
        self.assertEqual((cm.exception.share, cm.exception.held), (2, 0))
        self.assertIsNotNone(cm.exception.retry_at)
        # w1's next renew names the two shards to hand back
        lease, back = w1.renew(mine[0])
        self.assertEqual((lease.pool, lease.shard, lease.token), ("hb", mine[0].shard, mine[0].token))
        self.assertEqual(len(back), 2, back)
        by_name = {s.shard: s for s in mine}
        self.assertTrue(set(back) <= set(by_name))
        for name in back:
            w1.release(by_name[name])
        got = w2.claim()  # at once, no TTL waited
        self.assertIn(got.shard, back)
        self.assertGreater(got.token, by_name[got.shard].token)
        # w1's old token on the handed-back shard is refused at the proxy
        url = fp.proxy_url + "/hb/" + got.shard
        with self.assertRaises(errors.StaleTokenError) as se:
            transport.fenced_request("PUT", url, b"late w1", token=by_name[got.shard].token)
        self.assertEqual((se.exception.resource, se.exception.current), ("hb/" + got.shard, got.token))
        self.assertEqual(transport.fenced_request("PUT", url, b"w2", headers=got.headers()).status, 200)
        # w1 renews without hand_back once it is at its share
        self.assertEqual(w1.renew(mine[0])[1], [])
        # one-shot: w2 marks its shard done; again with the same token is fine
        done = w2.done(got)
        self.assertEqual((done["shard"], done["state"]), (got.shard, "done"))
        self.assertEqual(w2.done(got)["state"], "done")
        with self.assertRaises(errors.LeaseLostError):
            w2.renew(got)
        states = {s["shard"]: s for s in w1.get()["shards"]}
        self.assertEqual(states[got.shard]["state"], "done")
        self.assertEqual(states[got.shard]["token"], got.token)

    def test_run_one_shot(self):
        p = self.leases.pool("oneshot", "w1", 2)
        p.define(shards=3)
        events, written = [], []
        lock = threading.Lock()

        def work(held):
            held.check()
            resp = transport.fenced_request("PUT", fp.proxy_url + "/" + held.name, b"task", headers=held.headers())
            with lock:
                written.append((held.name, resp.status))

        t = threading.Thread(target=p.run, args=(work,), kwargs={"one_shot": True, "on_event": events.append},
                             daemon=True)
        t.start()
        t.join(20)
        self.assertFalse(t.is_alive(), "run did not return once every shard was done")
        self.assertEqual(sorted(written), [("oneshot/0", 200), ("oneshot/1", 200), ("oneshot/2", 200)])
        done = [e for e in events if e.kind == "done"]
        self.assertEqual(len(done), 3, events)
        self.assertTrue(all(e.error is None for e in done), events)
        self.assertEqual(p.get()["done"], 3)
        with self.assertRaises(errors.NoShardError) as cm:
            p.claim()
        self.assertTrue(cm.exception.all_done)

    def test_run_hands_back(self):
        p1 = self.leases.pool("handback", "r1", 3)
        p1.define(shards=2)
        ev1, ev2 = [], []
        stop1, stop2 = threading.Event(), threading.Event()
        holding = {"r1": set(), "r2": set()}
        lock = threading.Lock()

        def worker(who):
            def work(held):
                with lock:
                    holding[who].add(held.shard.shard)
                try:
                    while not held.stop.wait(0.05):
                        transport.fenced_request("PUT", fp.proxy_url + "/" + held.name, who.encode(),
                                                 headers=held.headers())
                    held.check()  # raises ShardStoppedError: released, not done
                finally:
                    with lock:
                        holding[who].discard(held.shard.shard)
            return work

        t1 = threading.Thread(target=p1.run, args=(worker("r1"),), kwargs={"on_event": ev1.append, "stop": stop1},
                              daemon=True)
        t1.start()
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(holding["r1"]) < 2:
                time.sleep(0.05)
            self.assertEqual(len(holding["r1"]), 2, ev1)
            p2 = self.leases.pool("handback", "r2", 3)
            t2 = threading.Thread(target=p2.run, args=(worker("r2"),), kwargs={"on_event": ev2.append, "stop": stop2},
                                  daemon=True)
            t2.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (len(holding["r1"]) == 1 and len(holding["r2"]) == 1):
                time.sleep(0.05)
            self.assertEqual((len(holding["r1"]), len(holding["r2"])), (1, 1), (ev1, ev2))
            kinds = [e.kind for e in ev1]
            self.assertIn("hand_back", kinds)
            released = [e for e in ev1 if e.kind == "released"]
            self.assertEqual(len(released), 1, ev1)
            self.assertIsInstance(released[0].work_error, errors.ShardStoppedError)
            self.assertIsNone(released[0].error)
            self.assertNotIn("lost", kinds)
        finally:
            stop1.set()
            stop2.set()
            t1.join(10)
            if "t2" in locals():
                t2.join(10)
        self.assertFalse(t1.is_alive())
        shards = p1.get()["shards"]
        self.assertEqual([s["state"] for s in shards], ["free", "free"], shards)


if __name__ == "__main__":
    unittest.main()
