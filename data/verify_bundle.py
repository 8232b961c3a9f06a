#!/usr/bin/env python3
"""Verify the bundled PDB files with gemmi and write manifest.tsv + split.tsv.

usage: verify_bundle.py PDB_DIR SOURCES_TSV OUT_DIR
A file is kept if gemmi reads it and, in its first model, it has a protein chain
with >= 20 standard amino-acid residues with coordinates, or (for entries without
such a protein chain, e.g. a tRNA) a nucleic-acid chain with >= 20 standard
nucleotides with coordinates; and it has no more than 3000 standard residues
(amino acids + nucleotides) in all. Any other file is deleted from PDB_DIR and
left out of the manifest/split.
"""
import csv, os, sys
import gemmi

STD_AA = set("ALA ARG ASN ASP CYS GLN GLU GLY HIS ILE LEU LYS MET PHE PRO SER THR TRP TYR VAL".split())
# standard RNA and DNA nucleotides; T is the thymidine name of PDB files older than format 3.0
STD_NA = set("A C G U I DA DC DG DT DI T".split())
MIN_CHAIN = 20
MAX_RES = 3000


def fnv1a32(s: str) -> int:
    h = 0x811C9DC5
    for b in s.encode("ascii"):
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def stats(path):
    st = gemmi.read_structure(path)
    model = st[0]
    chains, na_chains = [], []
    for ch in model:
        n = sum(1 for r in ch if r.name in STD_AA and len(r) > 0)
        if n:
            chains.append((ch.name, n))
        n = sum(1 for r in ch if r.name in STD_NA and len(r) > 0)
        if n:
            na_chains.append((ch.name, n))
    prot = [c for c in chains if c[1] >= MIN_CHAIN]
    na = [c for c in na_chains if c[1] >= MIN_CHAIN]
    title = " ".join(st.info["_struct.title"].split()) if "_struct.title" in st.info else ""
    entry_id = st.info["_entry.id"] if "_entry.id" in st.info else ""
    return dict(models=len(st), prot=prot, chains=chains, na=na,
                nres=sum(n for _, n in chains), nnuc=sum(n for _, n in na_chains),
                title=title, entry_id=entry_id)


def main():
    pdb_dir, src_tsv, out_dir = sys.argv[1:4]
    rows = list(csv.DictReader(open(src_tsv), delimiter="\t"))
    good, bad = [], []
    for r in rows:
        path = os.path.join(pdb_dir, r["file"])
        try:
            s = stats(path)
            if not s["prot"] and not s["na"]:
                raise ValueError("no protein chain with >= %d standard residues and no nucleic-acid "
                                 "chain with >= %d standard nucleotides" % (MIN_CHAIN, MIN_CHAIN))
            if s["nres"] + s["nnuc"] > MAX_RES:
                raise ValueError("too large (%d residues)" % (s["nres"] + s["nnuc"]))
            if s["entry_id"] and s["entry_id"].lower() != r["entry"]:
                raise ValueError("header id %s != %s" % (s["entry_id"], r["entry"]))
        except Exception as e:  # drop the file
            bad.append((r["file"], str(e)))
            os.remove(path)
            continue
        r.update(s)
        good.append(r)

    good.sort(key=lambda r: r["entry"])
    ids = [r["entry"] for r in good]
    val = {i for i in ids if fnv1a32(i) % 10 == 0}
    rule = "fnv1a32(id) % 10 == 0"
    if len(val) < 5:  # documented fallback
        val = {i for k, i in enumerate(ids) if k % 8 == 0}
        rule = "every 8th entry in sorted order (index % 8 == 0)"

    with open(os.path.join(out_dir, "split.tsv"), "w") as f:
        f.write("entry\tsplit\n")
        for i in ids:
            f.write("%s\t%s\n" % (i, "validation" if i in val else "train"))

    with open(os.path.join(out_dir, "manifest.tsv"), "w") as f:
        f.write("entry\tfile\tsplit\tprotein_chains\tstd_residues\tmodels\tchains\ttitle\tpackage\tversion\tpath_in_package\n")
        for r in good:
            f.write("\t".join([
                r["entry"], r["file"], "validation" if r["entry"] in val else "train",
                str(len(r["prot"])), str(r["nres"]), str(r["models"]),
                " ".join("%s:%d" % c for c in r["chains"]) or "-",
                r["title"] or "-", r["package"], r["version"], r["path_in_package"]]) + "\n")

    multi = sum(1 for r in good if len(r["prot"]) >= 2)
    na_only = sorted(r["entry"] for r in good if not r["prot"])
    print("entries: %d  multi-chain (>=2 protein chains): %d  validation: %d (%s)"
          % (len(good), multi, len(val), rule))
    print("kept by a nucleic-acid chain alone (no protein chain >= %d): %d %s"
          % (MIN_CHAIN, len(na_only), " ".join(na_only)))
    print("validation entries:", " ".join(sorted(val)))
    for fn, why in bad:
        print("DROPPED %s: %s" % (fn, why), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
