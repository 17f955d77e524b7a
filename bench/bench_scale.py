"""Scale benchmark of the partitioned index (issue 12): vecsift IVFIndex next to
faiss IndexIVFRaBitQ on N x 384 rows generated around real MiniLM embeddings.

    flock /tmp/vecsift-bench.lock python bench/bench_scale.py --n 1000000
    flock /tmp/vecsift-bench.lock python bench/bench_scale.py --n 10000000 --phase data   # then gt, ivf, faiss

Data: row i = normalise(real[s_i] + sigma * g_i / sqrt(384)), s_i uniform over
the 100k real base rows of ../shared/data/pypi-minilm, g_i standard normal,
seeded per block; written to /tmp/vecsift-scale/ in blocks and memory-mapped
(never held twice). sigma is chosen so that the 1,000 real queries' top-10
similarities on the generated set match their distribution on the real set
(calibrated on each query's 300 nearest real rows and their expected number of
copies; both distributions are printed from the exact ground truth).

Measured: build (train + add + save) time; bytes per vector on disk and
resident after open (anonymous and file, from /proc/self/smaps_rollup in a
fresh reader process); recall@10 vs exact (ground truth by exact_search in row
blocks, cached) for nprobe x oversample; single-thread one-query p50/p99;
2-thread batch QPS; filtered 1% / 10% (recall vs exact over allowed rows, rows
returned); faiss IndexIVFRaBitQ with the same nlist, nprobe and bits (1 bit
codes, 8-bit queries) with candidates rescored exactly from the same memmap
(numpy) and without; 4 reader processes' total PSS against one.
"""
from __future__ import annotations

import argparse
import json
import resource
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import vecsift
from vecsift.eval import recall_at_k

REAL = Path(os.environ.get("VECSIFT_MINILM", "/work/shared/data/pypi-minilm/vectors.f16.npy"))
WORK = Path(os.environ.get("VECSIFT_SCALE_DIR", "/work/bench-data"))
DIM = 384
BLOCK = 250_000


# ---------------------------------------------------------------- data
def load_real():
    v = np.load(REAL).astype(np.float32)
    return np.ascontiguousarray(v[:100_000]), np.ascontiguousarray(v[100_000:101_000])


def noisy(seeds_rows, sigma, rng):
    x = seeds_rows + (sigma / np.sqrt(DIM)) * rng.standard_normal(seeds_rows.shape, dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def calibrate_sigma(real, queries, n, nq=200, near=200, seed=1):
    """sigma whose generated top-10 similarities match the real ones (mean over ranks and queries).

    Each query's near real rows get Poisson(n / 100k) noisy copies; the noise
    is drawn once and sigma found by bisection on closed forms of the copies'
    similarities (common random numbers keep the search monotone).
    """
    ids, sims = vecsift.exact_search(real, queries[:nq], near, "cosine")
    target = float(sims[:, :10].mean())
    copies = n / real.shape[0]
    r = np.random.default_rng(seed)
    parts = []
    for qi in range(nq):
        rows = np.repeat(real[ids[qi]], r.poisson(copies, size=near), axis=0)
        g = r.standard_normal(rows.shape, dtype=np.float32) / np.sqrt(DIM)
        q = queries[qi]
        parts.append((rows @ q, g @ q, np.einsum("ij,ij->i", rows, rows), np.einsum("ij,ij->i", rows, g),
                      np.einsum("ij,ij->i", g, g)))

    def gen_top10(sigma):
        out = []
        for rq, gq, rr, rg, gg in parts:
            s = (rq + sigma * gq) / np.sqrt(rr + 2 * sigma * rg + sigma * sigma * gg)
            if s.size >= 10:
                out.append(np.partition(s, s.size - 10)[-10:].mean())
        return float(np.mean(out))

    lo, hi = 0.0, 4.0
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        if gen_top10(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi), target


def generate(path, n, sigma, real, seed):
    tmp = path.with_suffix(".part")
    mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, DIM))
    for b, s in enumerate(range(0, n, BLOCK)):
        rng = np.random.default_rng([seed, b])
        m = min(BLOCK, n - s)
        mm[s:s + m] = noisy(real[rng.integers(0, real.shape[0], m)], sigma, rng)
    mm.flush()
    del mm
    os.replace(tmp, path)


def ground_truth(base, queries, allows, k=10):
    """Exact top-k over a memmap in row blocks, unfiltered and for each allow
    mask, in one pass (the file is read once). Returns [(ids, sims), ...]."""
    masks = [None] + list(allows)
    best = [(np.full((len(queries), k), -1, np.int64), np.full((len(queries), k), -np.inf, np.float32))
            for _ in masks]
    step = 1_000_000
    for s in range(0, base.shape[0], step):
        blk = np.asarray(base[s:s + step])
        for j, m in enumerate(masks):
            a = None if m is None else m[s:s + blk.shape[0]]
            if a is not None and not a.any():
                continue
            i, sc = vecsift.exact_search(blk, queries, k, "ip", allow=a)
            i = np.where(i >= 0, i + s, -1)
            ci, cs = np.concatenate([best[j][0], i], 1), np.concatenate([best[j][1], sc], 1)
            o = np.argsort(-cs, axis=1, kind="stable")[:, :k]
            best[j] = (np.take_along_axis(ci, o, 1), np.take_along_axis(cs, o, 1))
    return best


def quantiles(s):
    return {f"p{p}": round(float(np.percentile(s, p)), 4) for p in (10, 50, 90)} | {"mean": round(float(s.mean()), 4)}


# ---------------------------------------------------------------- memory
def smaps_rollup(pid="self"):
    out = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def mapping_pss(path, pid="self"):
    """PSS and RSS of one file's mappings in a process."""
    pss = rss = 0
    inside = False
    for line in open(f"/proc/{pid}/smaps"):
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and head and head[0] == "Pss:":
            pss += int(head[1]) * 1024
        elif inside and head and head[0] == "Rss:":
            rss += int(head[1]) * 1024
    return pss, rss


def reader_main(args):
    """A reader process: open, search, report memory, wait for stdin to close."""
    base = np.load(args.base, mmap_mode="r")
    before = smaps_rollup()
    index = vecsift.IVFIndex.open(args.index, vectors=base)
    q = np.load(args.queries)
    index.search(q, 10, nprobe=args.nprobe, oversample=args.oversample, threads=1)
    after = smaps_rollup()
    ipss, irss = mapping_pss(args.index)
    rpss, rrss = mapping_pss(args.base)
    print(json.dumps({"anon_delta": after["Anonymous"] - before["Anonymous"], "anon": after["Anonymous"],
                      "pss": after["Pss"], "rss": after["Rss"], "index_pss": ipss, "index_rss": irss,
                      "rows_pss": rpss, "rows_rss": rrss}), flush=True)
    sys.stdin.read()


def readers(n_readers, index_path, base_path, q_path, nprobe, oversample):
    cmd = [sys.executable, __file__, "--reader", "--index", str(index_path), "--base", str(base_path),
           "--queries", str(q_path), "--nprobe", str(nprobe), "--oversample", str(oversample)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(n_readers)]
    first = [json.loads(p.stdout.readline()) for p in procs]
    # Re-read PSS once all are up: shared pages are divided among the readers now.
    now = []
    for p in procs:
        r = smaps_rollup(p.pid)
        ipss, _ = mapping_pss(index_path, p.pid)
        rpss, rrss = mapping_pss(base_path, p.pid)
        now.append({"pss": r["Pss"], "index_pss": ipss, "anon": r["Anonymous"], "rows_pss": rpss, "rows_rss": rrss})
    for p in procs:
        p.stdin.close()
        p.wait()
    return first, now


# ---------------------------------------------------------------- timing
LAT_DETAIL = {}


def latency(fn, queries):
    """p50 / p99 ms of one query per call, after a warm-up pass over the same
    queries (warm cache: the rows they rescore are mapped). Page faults and
    context switches during the timed pass go to LAT_DETAIL (per query)."""
    t, csw, flt = [], [], []
    for q in queries:
        fn(q)
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    for q in queries:
        r0 = resource.getrusage(who)
        t0 = time.perf_counter()
        fn(q)
        t.append(time.perf_counter() - t0)
        r1 = resource.getrusage(who)
        csw.append(r1.ru_nivcsw - r0.ru_nivcsw)
        flt.append(r1.ru_minflt - r0.ru_minflt + r1.ru_majflt - r0.ru_majflt)
    t, csw, flt = np.array(t) * 1e3, np.array(csw), np.array(flt)
    slow = t > 2 * np.percentile(t, 50)
    LAT_DETAIL.clear()
    LAT_DETAIL.update({"faults_per_q": round(float(flt.mean()), 3),
                       "preempted_share": round(float((csw > 0).mean()), 3),
                       "slow_share": round(float(slow.mean()), 3),
                       # of the queries slower than 2x the median, how many were preempted or faulted
                       "slow_preempted": round(float((csw[slow] > 0).mean()), 3) if slow.any() else None,
                       "slow_faulted": round(float((flt[slow] > 0).mean()), 3) if slow.any() else None,
                       "p50_unpreempted_ms": round(float(np.percentile(t[csw == 0], 50)), 3) if (csw == 0).any() else None,
                       "p99_unpreempted_ms": round(float(np.percentile(t[csw == 0], 99)), 3) if (csw == 0).any() else None,
                       "p90_ms": round(float(np.percentile(t, 90)), 3), "max_ms": round(float(t.max()), 3)})
    return float(np.percentile(t, 50)), float(np.percentile(t, 99))


def warm(arr, step=1 << 16):
    """Reads a mapped array once so its pages are in the page cache."""
    acc = 0.0
    for s in range(0, arr.shape[0], step):
        acc += float(np.asarray(arr[s:s + step]).reshape(-1)[::1024].sum())
    return acc


def batch_qps(fn, queries, reps=3):
    fn(queries[:50])
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(queries)
        best.append(time.perf_counter() - t0)
    return len(queries) / float(np.median(best))


def rescore(base, q, cand, k=10):
    """Exact top-k of candidate ids (numpy gather + dot), for faiss's candidates."""
    cand = np.where(cand >= 0, cand, 0)
    s = np.einsum("qd,qkd->qk", q, np.asarray(base[cand.reshape(-1)]).reshape(cand.shape[0], cand.shape[1], -1))
    o = np.argsort(-s, axis=1)[:, :k]
    return np.take_along_axis(cand, o, 1)


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sigma", type=float, default=None)
    ap.add_argument("--nlist", type=int, default=None)
    ap.add_argument("--nprobe", type=str, default="16,32,64,128")
    ap.add_argument("--oversample", type=str, default="8,16")
    ap.add_argument("--refine", type=str, default="8", help="sign scorer only")
    ap.add_argument("--scorer", default="rabitq")
    ap.add_argument("--bits", type=int, default=2)
    ap.add_argument("--centre", default="global")
    ap.add_argument("--code-dim", type=int, default=None,
                    help="rotated dimensions of the codes (default: IVFIndex's, 448 at 1-2 bits for 384-d)")
    ap.add_argument("--rescore", type=str, default="bound")
    ap.add_argument("--kmeans", default="auto", help="auto | flat | two_level (IVFIndex.train method)")
    ap.add_argument("--assign-top", type=int, default=3, help="two_level: coarse cells a row is assigned among")
    ap.add_argument("--coarse", type=int, default=None, help="two_level: coarse cells (default ~sqrt(nlist))")
    ap.add_argument("--sample-per-list", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--faiss-quantizer", default="own",
                    help="own: faiss trains and assigns with its flat k-means; shared: vecsift's centroids and "
                         "list assignment (faiss's flat assignment of 10M rows to 8k lists takes ~1 h here)")
    ap.add_argument("--faiss-refine", default="flat",
                    help="flat: IndexRefineFlat (its own float32 copy of the rows); numpy: faiss's k*oversample "
                         "candidates rescored exactly from the same memmap in numpy (no second copy)")
    ap.add_argument("--faiss-nprobe", type=str, default=None, help="default: --nprobe")
    ap.add_argument("--filter-nprobe", type=str, default=None, help="default: the last two of --nprobe")
    ap.add_argument("--faiss-qb", type=int, default=None, help="faiss query bits (default: vecsift's)")
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--qps-queries", type=int, default=1000, help="queries in each batch-QPS call")
    ap.add_argument("--faiss-oversample", type=str, default=None, help="default: none + --oversample")
    ap.add_argument("--phase", default="all", help="all | data | gt | ivf | readers | faiss (comma list)")
    ap.add_argument("--skip-faiss", action="store_true")
    ap.add_argument("--skip-readers", action="store_true")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--out", default="bench/results")
    # reader mode (internal)
    ap.add_argument("--reader", action="store_true")
    ap.add_argument("--index")
    ap.add_argument("--base")
    ap.add_argument("--queries")
    args = ap.parse_args()
    if args.reader:
        args.nprobe, args.oversample = int(args.nprobe), int(args.oversample.split(",")[0])
        return reader_main(args)

    phases = set(args.phase.split(","))
    run_all = "all" in phases
    WORK.mkdir(parents=True, exist_ok=True)
    tag = f"{args.n}_{args.seed}"
    result = {"machine": f"{platform.processor() or platform.machine()} x{os.cpu_count()}",
              "cpu": vecsift.cpu_features()["level"], "n": args.n}
    out_path = Path(args.out) / f"bench_scale_{args.n}.json"
    if out_path.exists():
        result = json.loads(out_path.read_text()) | result

    def save():
        Path(args.out).mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=1))

    real, queries = load_real()
    q_path = WORK / "queries.npy"
    np.save(q_path, queries)
    base_path = WORK / f"base_{tag}.npy"
    meta_path = WORK / f"base_{tag}.json"

    # ---- data
    if not base_path.exists():
        t0 = time.perf_counter()
        sigma, target = calibrate_sigma(real, queries, args.n) if args.sigma is None else (args.sigma, None)
        t1 = time.perf_counter()
        generate(base_path, args.n, sigma, real, args.seed)
        meta_path.write_text(json.dumps({"sigma": sigma, "target_top10_mean": target,
                                         "calibrate_s": t1 - t0, "generate_s": time.perf_counter() - t1}))
    result["data"] = json.loads(meta_path.read_text())
    print("data", result["data"], flush=True)
    base = np.load(base_path, mmap_mode="r")
    if phases == {"data"}:
        return

    # ---- ground truth (cached), filters
    gt_path = WORK / f"gt_{tag}.npz"
    rng = np.random.default_rng(12)
    allow = {"1%": rng.random(args.n) < 0.01, "10%": rng.random(args.n) < 0.10}
    if not gt_path.exists():
        t0 = time.perf_counter()
        (gi, gs), (f1, _), (f10, _) = ground_truth(base, queries, [allow["1%"], allow["10%"]])
        np.savez(gt_path, ids=gi, sims=gs, f1=f1, f10=f10)
        print(f"ground truth {time.perf_counter() - t0:.1f} s", flush=True)
    gt = np.load(gt_path)
    gt_ids, gt_f = gt["ids"], {"1%": gt["f1"], "10%": gt["f10"]}
    real_ids, real_sims = vecsift.exact_search(real, queries, 10, "cosine")
    result["top10_similarity"] = {"real_100k": quantiles(real_sims), "generated": quantiles(gt["sims"]),
                                  "real_top1": quantiles(real_sims[:, 0]), "generated_top1": quantiles(gt["sims"][:, 0])}
    print("top-10 similarity", result["top10_similarity"], flush=True)
    save()
    if phases <= {"data", "gt"}:
        return

    nlist = args.nlist or vecsift.index.partitioned.default_nlist(args.n)
    nprobes = [int(x) for x in args.nprobe.split(",")]
    oversamples = [int(x) for x in args.oversample.split(",")]
    refines = [int(x) for x in args.refine.split(",")] if args.scorer == "sign" else [1]
    rescores = args.rescore.split(",") if args.scorer == "rabitq" else ["-"]
    result["nlist"] = nlist
    lat_q = queries[:args.latency_queries]
    qps_q = queries[:args.qps_queries]

    kind = (f"rabitq{args.bits}{args.centre[0]}" if args.scorer == "rabitq" else "sign")
    if args.code_dim and args.scorer == "rabitq":
        kind += f"d{args.code_dim}"
    km = args.kmeans if args.kmeans != "auto" else ("two_level" if nlist >= vecsift.index.partitioned.TWO_LEVEL_MIN_NLIST
                                                     else "flat")
    if km == "two_level":
        km += f"{args.assign_top}" + (f"c{args.coarse}" if args.coarse else "")
    if (args.sample_per_list, args.iters) != (64, 10):
        km += f"_s{args.sample_per_list}i{args.iters}"
    kind = f"{kind}_{km}"
    index_path = WORK / f"ivf_{tag}_{nlist}_{kind}.ivf"

    # ---- vecsift IVF
    if run_all or "ivf" in phases:
        if args.rebuild or not index_path.exists():
            t0 = time.perf_counter()
            kw = {"code_dim": args.code_dim} if args.code_dim and args.scorer == "rabitq" else {}
            ix = vecsift.IVFIndex(DIM, nlist, "ip", scorer=args.scorer, bits=args.bits, centre=args.centre, **kw)
            ix.train(base, method=args.kmeans, coarse=args.coarse, assign_top=args.assign_top,
                     sample_per_list=args.sample_per_list, iters=args.iters)
            t1 = time.perf_counter()
            ix.add(base)
            t2 = time.perf_counter()
            ix.save(index_path, include_vectors=False)
            t3 = time.perf_counter()
            result[f"ivf_build_{kind}"] = {"train_s": t1 - t0, "add_s": t2 - t1, "save_s": t3 - t2,
                                           "total_s": t3 - t0, "add_parts": ix.build_times,
                                           "balance": ix.balance()}
            del ix
            print("build", result[f"ivf_build_{kind}"], flush=True)
            save()
        index = vecsift.IVFIndex.open(index_path, vectors=base)
        if args.faiss_quantizer == "shared":
            shared_centroids = np.array(index.centroids)
            lay = index._layout
            lists = np.repeat(np.arange(index.nlist), np.diff(np.asarray(lay.list_block)) * 32)
            sr = np.asarray(lay.slot_row)
            valid = sr >= 0
            shared_assign = np.empty(args.n, dtype=np.int64)
            shared_assign[sr[valid]] = lists[valid]
            del lists, sr, valid, lay
        t0 = time.perf_counter()
        warm(base)
        warm(index._layout.codes)
        print(f"warmed rows and codes in {time.perf_counter() - t0:.1f} s", flush=True)
        result["ivf_kind"] = kind
        result["ivf_disk_bytes_per_vector"] = os.path.getsize(index_path) / args.n
        result["ivf_balance"] = index.balance()
        rows = []
        for npb in nprobes:
            for os_ in oversamples:
                for rf in refines:
                    for rs in rescores:
                        kw = dict(nprobe=npb, oversample=os_)
                        kw.update(refine=rf) if args.scorer == "sign" else kw.update(rescore=rs)
                        ids, _, st = index.search(queries, 10, threads=2, return_stats=True, **kw)
                        rec = recall_at_k(ids, gt_ids, 10)
                        qps = batch_qps(lambda q: index.search(q, 10, threads=2, **kw), qps_q)
                        p50, p99 = latency(lambda q: index.search(q, 10, threads=1, **kw), lat_q)
                        row = {**kw, "recall": round(rec, 4), "p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
                               "qps_2t": round(qps), "rows_scanned": st["rows"] // len(queries),
                               "rescored": round(st.get("rescored", 0) / len(queries), 1), **LAT_DETAIL}
                        rows.append(row)
                        print("ivf", row, flush=True)
        result[f"ivf_{kind}"] = rows
        frows = []
        for name, a in allow.items():
            for npb in ([int(x) for x in args.filter_nprobe.split(",")] if args.filter_nprobe else nprobes[-2:]):
                kw = dict(nprobe=npb, oversample=oversamples[-1], allow=a)
                kw.update(refine=refines[-1]) if args.scorer == "sign" else kw.update(rescore=rescores[-1])
                ids, _, st = index.search(queries, 10, threads=2, return_stats=True, **kw)
                p50, p99 = latency(lambda q: index.search(q, 10, threads=1, **kw), lat_q[:100])
                row = {"filter": name, "nprobe": npb, "oversample": oversamples[-1],
                       "recall": round(recall_at_k(ids, gt_f[name], 10), 4),
                       "min_rows_returned": int((ids >= 0).sum(1).min()), "p50_ms": round(p50, 3),
                       "p99_ms": round(p99, 3), "exact_path_queries": st["exact"],
                       "lists_probed": st["lists"] / len(queries)}
                frows.append(row)
                print("ivf filtered", row, flush=True)
        result[f"ivf_filtered_{kind}"] = frows
        save()
        del index
    if not args.skip_readers and (run_all or "ivf" in phases or "readers" in phases):
        # This process unmaps the rows first: its own mapping would take a share of
        # the readers' pages and make one reader look cheaper than it is.
        import gc
        del base
        gc.collect()
        npb, os_ = nprobes[-1], oversamples[-1]
        one_first, one_now = readers(1, index_path, base_path, q_path, npb, os_)
        four_first, four_now = readers(4, index_path, base_path, q_path, npb, os_)
        result[f"memory_{kind}"] = {
            "anon_bytes_per_vector_after_open": one_first[0]["anon_delta"] / args.n,
            "index_file_rss_bytes_per_vector": one_first[0]["index_rss"] / args.n,
            "one_reader": one_now[0], "four_readers": four_now,
            "pss_ratio_4_vs_1": sum(r["pss"] for r in four_now) / one_now[0]["pss"],
            "index_pss_ratio_4_vs_1": sum(r["index_pss"] for r in four_now) / max(1, one_now[0]["index_pss"]),
            "rows_pss_ratio_4_vs_1": sum(r["rows_pss"] for r in four_now) / max(1, one_now[0]["rows_pss"]),
        }
        print("memory", result[f"memory_{kind}"], flush=True)
        save()
        base = np.load(base_path, mmap_mode="r")

    # ---- faiss IndexIVFRaBitQ, same nlist / nprobe / bits
    if not args.skip_faiss and (run_all or "faiss" in phases):
        import faiss
        t0 = time.perf_counter()
        quant = faiss.IndexFlatIP(DIM)
        if args.faiss_quantizer == "shared":  # vecsift's lists: faiss's train then only fits RaBitQ
            quant.add(shared_centroids)
        fx = faiss.IndexIVFRaBitQ(quant, DIM, nlist, faiss.METRIC_INNER_PRODUCT, True, args.bits)
        sample = np.random.default_rng(0).choice(args.n, size=min(args.n, nlist * 64), replace=False)
        fx.train(np.ascontiguousarray(base[np.sort(sample)]))
        # Exact rescoring inside faiss (C++): IndexRefineFlat holds its own float32 copy of the rows
        # (adds go to both; the copy costs a memcpy of the rows). "numpy": no copy, see rescore().
        ref = faiss.IndexRefineFlat(fx) if args.faiss_refine == "flat" else None
        for s in range(0, args.n, BLOCK):
            xb = np.ascontiguousarray(base[s:s + BLOCK])
            if args.faiss_quantizer == "shared":
                fa = np.ascontiguousarray(shared_assign[s:s + xb.shape[0]])
                fx.add_core(xb.shape[0], faiss.swig_ptr(xb), None, faiss.swig_ptr(fa))
                if ref is not None:
                    ref.refine_index.add(xb)
                    ref.ntotal = fx.ntotal
            else:
                (ref if ref is not None else fx).add(xb)
        result["faiss_build_s"] = time.perf_counter() - t0
        print(f"faiss build {result['faiss_build_s']:.1f} s", flush=True)
        qb = args.faiss_qb or vecsift.index.quantised.default_query_bits(args.bits)
        result["faiss_params"] = {"bits": args.bits, "qb": qb, "nlist": nlist, "quantizer": args.faiss_quantizer,
                                  "refine": "IndexRefineFlat" if ref is not None else "numpy from the memmap"}
        rows = []
        fnprobes = [int(x) for x in (args.faiss_nprobe or args.nprobe).split(",")]
        for npb in fnprobes:
            for os_ in ([1] + oversamples if args.faiss_oversample is None
                        else [int(x) for x in args.faiss_oversample.split(",")]):
                p = faiss.IVFRaBitQSearchParameters()
                p.nprobe = npb
                p.qb = qb
                rp = faiss.IndexRefineSearchParameters()
                rp.k_factor, rp.base_index_params = float(os_), p

                def fsearch(q, threads):
                    faiss.omp_set_num_threads(threads)
                    q = q.reshape(-1, DIM)
                    if os_ == 1:
                        return fx.search(q, 10, params=p)[1]
                    if ref is None:
                        return rescore(base, q, fx.search(q, 10 * os_, params=p)[1])
                    return ref.search(q, 10, params=rp)[1]
                ids = fsearch(queries, 2)
                rec = recall_at_k(ids, gt_ids, 10)
                qps = batch_qps(lambda q: fsearch(q, 2), qps_q)
                p50, p99 = latency(lambda q: fsearch(q, 1), lat_q)
                row = {"nprobe": npb, "oversample": os_ if os_ > 1 else "none", "recall": round(rec, 4),
                       "p50_ms": round(p50, 3), "p99_ms": round(p99, 3), "qps_2t": round(qps)}
                rows.append(row)
                print("faiss", row, flush=True)
        result[f"faiss_ivf_rabitq_{args.bits}bit"] = rows
        faiss.omp_set_num_threads(os.cpu_count())
        save()


if __name__ == "__main__":
    main()
