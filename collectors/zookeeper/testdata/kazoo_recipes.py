"""Drives kazoo's Lock, ReadLock/WriteLock and Election against a ZooKeeper
server, for the collector's test (kazoo_test.go).

Usage: kazoo_recipes.py HOST:PORT BASE

Each holder's own account of what it did is printed as one JSON line:
{"event": "acquired" or "released", "lock", "identifier", "session",
"node", "czxid", "shared"}. After each line the script waits for a line on
stdin, so the test can see the collector record it before the next step.
"""
import json
import sys
import threading

from kazoo.client import KazooClient

server, base = sys.argv[1], sys.argv[2]
said = threading.Lock()
tokens = {}  # node -> its czxid, read while it held


def client():
    c = KazooClient(hosts=server, timeout=10)
    c.start(timeout=10)
    return c


def say(event, c, path, node, identifier, shared=False):
    """Prints what a holder did and waits for the test's go-ahead."""
    if event == "acquired":
        tokens[node] = c.exists(path + "/" + node).czxid
    with said:
        print(json.dumps({
            "event": event, "lock": path, "identifier": identifier,
            "session": hex(c.client_id[0]), "node": node,
            "czxid": tokens[node], "shared": shared,
        }), flush=True)
        if not sys.stdin.readline():
            sys.exit("the test went away")


def contenders(c, path, n):
    """Waits until path has n children: a contender has queued."""
    ready = threading.Event()

    def watch(children):
        if len(children) >= n:
            ready.set()
            return False
        return True

    c.ChildrenWatch(path, watch)
    ready.wait(10)


def hold(c, lk, path, identifier, shared=False):
    lk.acquire()
    node = lk.node
    say("acquired", c, path, node, identifier, shared)
    return node


def release(c, lk, path, node, identifier):
    lk.release()
    say("released", c, path, node, identifier)


def handover(path, make):
    """Two contenders of an exclusive recipe: the first holds while the
    second queues, then the second holds."""
    c1, c2 = client(), client()
    l1, l2 = make(c1, "worker-1"), make(c2, "worker-2")
    n1 = hold(c1, l1, path, "worker-1")
    got = {}
    t = threading.Thread(target=lambda: got.update(node=hold(c2, l2, path, "worker-2")))
    t.start()
    contenders(c1, path, 2)
    release(c1, l1, path, n1, "worker-1")
    t.join()
    release(c2, l2, path, got["node"], "worker-2")


def election(path):
    """Two candidates of kazoo's Election: the second leads once the
    first's leadership function returns."""
    c1, c2 = client(), client()
    e1, e2 = c1.Election(path, "leader-1"), c2.Election(path, "leader-2")

    def lead(c, e, identifier, then=None):
        node = []
        e.run(lambda: (node.append(e.lock.node), say("acquired", c, path, e.lock.node, identifier),
                       then and then()))
        say("released", c, path, node[0], identifier)

    t = threading.Thread(target=lead, args=(c2, e2, "leader-2"))
    lead(c1, e1, "leader-1", then=lambda: (t.start(), contenders(c1, path, 2)))
    t.join()


def read_write(path):
    """Two readers hold together while a writer queues behind them; the
    writer holds once both are gone."""
    c1, c2, c3 = client(), client(), client()
    r1, r2 = c1.ReadLock(path, "reader-1"), c2.ReadLock(path, "reader-2")
    w = c3.WriteLock(path, "writer")
    n1 = hold(c1, r1, path, "reader-1")
    n2 = hold(c2, r2, path, "reader-2", shared=True)
    got = {}
    t = threading.Thread(target=lambda: got.update(node=hold(c3, w, path, "writer")))
    t.start()
    contenders(c1, path, 3)
    release(c1, r1, path, n1, "reader-1")
    release(c2, r2, path, n2, "reader-2")
    t.join()
    release(c3, w, path, got["node"], "writer")


handover(base + "/mutex", lambda c, ident: c.Lock(base + "/mutex", ident))
election(base + "/election")
read_write(base + "/rw")
