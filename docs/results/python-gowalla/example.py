import numpy as np, scipy.sparse as sp, matplotlib.pyplot as plt
import widebag

def read(path):  # LightGCN's lines, "user item item …" → (users, items)
    pairs = [(int(u), int(i)) for line in open(path) for u, *items in [line.split()] for i in items]
    return np.array(pairs, dtype=np.int64).T

(u, i), (tu, ti) = read("../shared/data/gowalla/train.txt"), read("../shared/data/gowalla/test.txt")
shape = (max(u.max(), tu.max()) + 1, max(i.max(), ti.max()) + 1)
X = sp.csr_matrix((np.ones(len(u), np.float32), (u, i)), shape=shape)
X_test = sp.csr_matrix((np.ones(len(tu), np.float32), (tu, ti)), shape=shape)

config = widebag.Config("configs/gowalla.toml")  # Mult-DAE; the rows given replace its data keys
print(widebag.explain(config))                   # every byte of a training step, as `widebag explain`
run = widebag.train(config, data=X, test=X_test) # held-out items ranked with seen ones left out
print(run.history[-1]["recall@20"], run.history[-1]["ndcg@20"])

epochs = [e["epoch"] for e in run.history]
plt.plot(epochs, [e["recall@20"] for e in run.history], marker="o", label="widebag Mult-DAE")
plt.axhline(0.1641, linestyle="--", color="gray", label="Mult-VAE, published")
plt.xlabel("epoch"); plt.ylabel("Recall@20"); plt.legend(); plt.savefig("gowalla-recall.png")
ids, log_probs = run.predict(X[:3], top_k=20)    # users 0-2: their next 20 items, seen ones out

import json, shutil; json.dump({"history": run.history, "path": run.path}, open("/work/m/pyex/out/history.json", "w"), indent=1)
shutil.copy(run.path + "/summary.json", "/work/m/pyex/out/summary.json"); shutil.copy(run.path + "/metrics.jsonl", "/work/m/pyex/out/metrics.jsonl"); shutil.copy(run.path + "/config.toml", "/work/m/pyex/out/config.toml")
print("predict users 0-2:", ids.tolist(), log_probs[:, :3].tolist())
