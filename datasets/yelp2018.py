"""Rebuild Yelp2018's `train.txt` (the LightGCN/NGCF split) from its training matrix.

The split's own `train.txt` is too large for this project's mirror; the same split's training
interactions are stored as a users x items CSR matrix, `data/yelp2018/s_pre_adj_mat.npz`, in
qqssyy/HiLGCN (commit 18d6fa9). This writes them as the `lightgcn` format (one line per user: the
user id, then its items in ascending order) and checks the published counts
(31,668 users x 38,048 items, n_train = 1,237,259). `test.txt` is the split's own file
(LightGCN-PyTorch `data/yelp2018/test.txt`, commit 947ca2b). Needs numpy only.

    git -C HiLGCN show 18d6fa9:data/yelp2018/s_pre_adj_mat.npz > adj.npz
    python3 datasets/yelp2018.py adj.npz OUT/train.txt
"""
import os
import sys

import numpy as np


def main(npz_path, out_path):
    z = np.load(npz_path)
    if bytes(z["format"]) != b"csr":
        sys.exit(f"{npz_path}: expected a CSR matrix, found {bytes(z['format'])!r}")
    n_users, n_items = (int(x) for x in z["shape"])
    indptr, indices = z["indptr"], z["indices"]
    if (n_users, n_items, len(indices)) != (31668, 38048, 1237259):
        sys.exit(f"{npz_path}: {n_users} x {n_items}, {len(indices)} pairs: "
                 "not the published split")
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        for user in range(n_users):
            items = np.sort(indices[indptr[user]:indptr[user + 1]])
            f.write(" ".join(str(x) for x in [user, *items.tolist()]) + "\n")
    os.replace(tmp, out_path)
    print(f"{out_path}: {n_users} users, {n_items} items, {len(indices)} interactions")


if __name__ == "__main__":
    main(*sys.argv[1:3])
