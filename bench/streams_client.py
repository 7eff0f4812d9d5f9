# bench/streams_client.py - N concurrent streaming completions (threads, stdlib only).
# usage: streams_client.py PORT KEY N
import http.client, json, sys, threading, time
port, key, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
done, errs, ids = [0], [], set()
lock = threading.Lock()
def one(i):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = json.dumps({"model": "tiny", "prompt": "hello %d" % i, "max_tokens": 16, "stream": True})
        c.request("POST", "/v1/completions", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        ok = r.status == 200 and data.rstrip().endswith("data: [DONE]")
        rid = json.loads(data.split("\n")[0][6:])["id"]
        with lock:
            if ok: done[0] += 1
            else: errs.append(r.status)
            ids.add(rid)
    except Exception as e:
        with lock: errs.append(repr(e))
t0 = time.time()
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print("completed %d of %d, unique ids %d, errors %d %s, %.1f s" % (done[0], n, len(ids), len(errs), errs[:3], time.time() - t0))
