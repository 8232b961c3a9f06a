"""Prediction and evaluation through the CLI: a tiny checkpoint with the diffusion module and
the confidence head predicts structures for mmCIF and FASTA input (chains, numbering and
pLDDT B-factors in gemmi-readable mmCIF, a JSON summary), and `eval` scores a directory."""
import json
import shutil
import subprocess

import pytest

CONFIG = {
    "base": "cpu-tiny",
    "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
              "tri_mul_hidden": 8, "single_attn_heads": 2, "single_attn_head_dim": 8, "recycles": 2,
              "diffusion": {"c_token": 16, "n_blocks": 1, "heads": 2, "fourier_dim": 16, "c_atom": 8,
                            "c_atompair": 4, "atom_blocks": 1, "atom_heads": 2, "samples": 2,
                            "sampler_steps": 4},
              "confidence": {"n_blocks": 1, "rollout_steps": 2, "every": 1},
              "templates": {"n_blocks": 1, "c": 8, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
                            "tri_mul_hidden": 8}},
    "data": {"crop_size": 24, "val_crop_size": 24},
    "device": "cpu", "steps": 3, "log_every": 1, "val_every": 0, "checkpoint_every": 3, "threads": 1,
}


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def checkpoint(megafold_bin, source_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predict")
    config = tmp / "tiny.json"
    config.write_text(json.dumps(CONFIG))
    r = run(megafold_bin, "train", "--config", config, "--data", source_dir / "data/pdb", "--out", tmp / "run",
            "--quiet")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in open(tmp / "run/metrics.jsonl")]
    assert any("plddt_loss" in row for row in rows if row["kind"] == "train")
    (ckpt,) = sorted((tmp / "run/checkpoints").glob("step_*.pt"))
    return ckpt


def sample_file(out, name, seed, k, suffix="_model.cif"):
    """A sample's file in AlphaFold 3's output layout."""
    return out / f"seed-{seed}_sample-{k}" / f"{name}_seed-{seed}_sample-{k}{suffix}"


def atom_site(path):
    """Rows of the _atom_site loop as dicts (plain whitespace-separated values)."""
    lines = path.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("_atom_site."))
    tags = []
    i = start
    while lines[i].startswith("_atom_site."):
        tags.append(lines[i].split(".", 1)[1].strip())
        i += 1
    rows = []
    while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "loop_", "_")):
        rows.append(dict(zip(tags, lines[i].split())))
        i += 1
    return rows


def test_predict_structure_keeps_chains_numbering_and_writes_plddt(megafold_bin, source_dir, checkpoint, tmp_path):
    out = tmp_path / "out"
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", source_dir / "data/pdb/1a8o.cif.gz",
            "--out", out, "--samples", "2", "--seed", "3")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "1a8o_summary.json").read_text())
    assert summary["checkpoint_step"] == 3 and len(summary["samples"]) == 2
    for row in summary["samples"]:
        assert 0 <= row["plddt_mean"] <= 100
        assert 0 <= row["lddt_ca"] <= 1 and 0 <= row["lddt_all_atom"] <= 1
        assert isinstance(row["mirror_image"], bool)
    # The best-ranked of the two is also the top-level model; the CSV lists both, best first.
    best = summary["ranking"][0]
    assert (out / "1a8o_model.cif").read_text() == sample_file(out, "1a8o", 3, best).read_text()
    ranked = (out / "1a8o_ranking_scores.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in ranked[1:]] == [["3", str(k)] for k in summary["ranking"]]
    atoms = atom_site(sample_file(out, "1a8o", 3, 0))
    assert atoms[0]["group_PDB"] == "ATOM"
    assert {a["auth_asym_id"] for a in atoms} == {"A"}
    assert atoms[0]["auth_seq_id"] == "151" and atoms[0]["label_seq_id"] == "1"  # author numbering kept
    assert all(0 <= float(a["B_iso_or_equiv"]) <= 100 for a in atoms)
    # Same seed, same structures; the files read back through the project's gemmi loader.
    again = tmp_path / "again"
    assert run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input",
               source_dir / "data/pdb/1a8o.cif.gz", "--out", again, "--samples", "2", "--seed", "3").returncode == 0
    assert sample_file(again, "1a8o", 3, 1).read_text() == sample_file(out, "1a8o", 3, 1).read_text()
    ev = run(megafold_bin, "eval", "--checkpoint", checkpoint, "--data", out, "--out", tmp_path / "self.json")
    assert ev.returncode == 0, ev.stderr
    scored = json.loads((tmp_path / "self.json").read_text())
    assert scored["entries"] == 3  # two samples and the top one
    assert 0 <= scored["mirror_images"] <= 1 and all(0 <= r["mirror_images"] <= 1 for r in scored["rows"])


def test_hand_probe(megafold_bin, checkpoint, source_dir, tmp_path):
    """dev hand-probe: one row per noise level, fractions of 16ths, the same for the same seed; it
    needs coordinates, so sequences are refused with a reason."""
    def probe(out, seed):
        r = run(megafold_bin, "dev", "hand-probe", "--checkpoint", checkpoint, "--input",
                source_dir / "data/pdb/1a8o.cif.gz", "--noise", "0.5,60", "--draws", "16", "--seed", str(seed),
                "--device", "cpu", "--out", out)
        assert r.returncode == 0, r.stderr
        assert "from mirror" in r.stdout
        return json.loads(out.read_text())["rows"]
    rows = probe(tmp_path / "a.json", 1)
    assert [row["t"] for row in rows] == [0.5, 60]
    for row in rows:
        for key in ("from_truth", "from_mirror"):
            assert 0 <= row[key] <= 1 and (row[key] * 16).is_integer()
    assert probe(tmp_path / "b.json", 1) == rows
    fasta = tmp_path / "seq.fasta"
    fasta.write_text(">A\nMKTAYIAKQR\n")
    r = run(megafold_bin, "dev", "hand-probe", "--checkpoint", checkpoint, "--input", fasta, "--device", "cpu")
    assert r.returncode == 1 and "needs a structure's coordinates" in r.stderr
    r = run(megafold_bin, "dev", "hand-probe", "--checkpoint", checkpoint, "--input", fasta, "--noise", "1,x")
    assert r.returncode == 1 and "--noise: 'x' is not a positive number" in r.stderr


def predict_fasta(megafold_bin, checkpoint, tmp_path, name, records, *options):
    """Writes `records` to <tmp>/<name>.fasta and predicts one sample into <tmp>/out."""
    fasta = tmp_path / f"{name}.fasta"
    fasta.write_text(records)
    out = tmp_path / "out"
    return run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", fasta, "--out", out, "--samples", "1",
               *options), out


def test_predict_fasta(megafold_bin, checkpoint, tmp_path):
    r, out = predict_fasta(megafold_bin, checkpoint, tmp_path, "pair", ">one\nMKTAYIAKQR\n>two\nGSHM\n")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "pair_summary.json").read_text())
    assert [c["id"] for c in summary["chains"]] == ["A", "B"]
    assert "lddt_ca" not in summary["samples"][0]  # no coordinates to score against
    atoms = atom_site(sample_file(out, "pair", 0, 0))
    assert {a["auth_asym_id"] for a in atoms} == {"A", "B"}
    assert sum(1 for a in atoms if a["label_atom_id"] == "CA") == 14


def test_predict_reads_msas_for_its_chains(megafold_bin, checkpoint, tmp_path):
    msas = tmp_path / "msas"
    msas.mkdir()
    (msas / "pair_A.a3m").write_text(">query\nMKTAYIAKQR\n>hit\nMKTAYLAKQR\n>hit2\nMKSAYIAK--\n")
    (msas / "pair_B.a3m").write_text(">query\nGSHW\n>hit\nGSHM\n")  # not chain B's sequence
    records = ">one\nMKTAYIAKQR\n>two\nGSHM\n"
    r, _ = predict_fasta(megafold_bin, checkpoint, tmp_path, "pair", records, "--msa", msas)
    assert r.returncode == 0, r.stderr
    assert "chain A: MSA of 3 rows" in r.stdout
    assert "MSA not used" in r.stderr and "pair_B.a3m" in r.stderr
    r, _ = predict_fasta(megafold_bin, checkpoint, tmp_path, "pair", records, "--msa", tmp_path / "none")
    assert r.returncode == 1 and "--msa" in r.stderr and "not a directory" in r.stderr


def test_predict_fasta_with_dna_and_ligands(megafold_bin, checkpoint, tmp_path):
    # A model trained on proteins alone still takes every molecule type: DNA by its letters,
    # ligands by CCD code (ATP: 31 heavy atoms, MG: 1), each written as its own chain.
    r, out = predict_fasta(megafold_bin, checkpoint, tmp_path, "complex",
                           ">A|protein\nMKTAYIAKQR\n>B|dna\nACGTN\n>C|ccd\nATP MG\n")
    assert r.returncode == 0, r.stderr
    chains = json.loads((out / "complex_summary.json").read_text())["chains"]
    assert [(c["label_asym_id"], c["molecule"], c["residues"]) for c in chains] == [
        ("A", "protein", 10), ("B", "dna", 5), ("C", "ligand", 2)]
    atoms = atom_site(sample_file(out, "complex", 0, 0))
    het = [a for a in atoms if a["group_PDB"] == "HETATM"]
    assert sum(1 for a in het if a["label_comp_id"] == "ATP") == 31
    assert [a["type_symbol"] for a in het if a["label_comp_id"] == "MG"] == ["MG"]
    assert {a["label_comp_id"] for a in atoms if a["label_asym_id"] == "B"} == {"DA", "DC", "DG", "DT", "DN"}
    assert all(a["group_PDB"] == "ATOM" for a in atoms if a["label_asym_id"] in ("A", "B"))
    # AF3-style confidences: per written atom, per token (10 + 5 + 31 + 1 = 47), per chain pair.
    conf = json.loads(sample_file(out, "complex", 0, 0, "_confidences.json").read_text())
    assert len(conf["atom_plddts"]) == len(conf["atom_chain_ids"]) == len(atoms)
    assert conf["token_chain_ids"] == ["A"] * 10 + ["B"] * 5 + ["C"] * 32
    pae = conf["pae"]
    assert len(pae) == 47 and all(len(row) == 47 and all(0 <= v <= 32 for v in row) for row in pae)
    assert all(0 <= v <= 1 for row in conf["contact_probs"] for v in row)
    scores = json.loads(sample_file(out, "complex", 0, 0, "_summary_confidences.json").read_text())
    assert 0 < scores["ptm"] <= 1 and 0 < scores["iptm"] <= 1 and scores["has_clash"] in (True, False)
    assert len(scores["chain_pair_iptm"]) == 3 and all(len(row) == 3 for row in scores["chain_pair_iptm"])
    assert scores["chain_ptm"] == [scores["chain_pair_iptm"][c][c] for c in range(3)]
    # AF3's ranking score with its disorder term over the protein chain (DNA and ligands left out).
    assert 0 <= scores["fraction_disordered"] <= 1
    assert scores["ranking_score"] == pytest.approx(0.8 * scores["iptm"] + 0.2 * scores["ptm"]
                                                    + 0.5 * scores["fraction_disordered"]
                                                    - (100 if scores["has_clash"] else 0))
    summary = json.loads((out / "complex_summary.json").read_text())
    assert summary["ranking"] == [0]
    assert (out / "complex_ranking_scores.csv").read_text().splitlines()[0] == "seed,sample,ranking_score"
    # The best-ranked sample's files again at the top, as AlphaFold 3 lays them out.
    for suffix in ("_model.cif", "_confidences.json", "_summary_confidences.json"):
        assert (out / f"complex{suffix}").read_text() == sample_file(out, "complex", 0, 0, suffix).read_text()


def test_predict_alphafold3_json(megafold_bin, source_dir, checkpoint, tmp_path):
    job = source_dir / "tests/fixtures/af3/complex.json"
    out = tmp_path / "out"
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", job, "--out", out, "--samples", "1")
    assert r.returncode == 0, r.stderr
    assert "modelSeeds: sampling with the first seed (7) only" in r.stderr
    assert "pairedMsa" not in r.stderr  # given empty: nothing unused to report
    summary = json.loads((out / "complex_of_every_kind_1_summary.json").read_text())
    assert summary["seed"] == 7
    assert [c["id"] for c in summary["chains"]][:6] == ["A", "B", "C", "D", "E", "F"]
    atoms = atom_site(sample_file(out, "complex_of_every_kind_1", 7, 0))
    assert {a["label_comp_id"] for a in atoms if a["auth_asym_id"] == "A"} >= {"SEP", "MET"}
    assert any(a["label_comp_id"] == "NAG" for a in atoms)
    again = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", job, "--out", tmp_path / "again",
                "--samples", "1", "--seed", "11")
    assert again.returncode == 0 and "modelSeeds" not in again.stderr
    assert json.loads((tmp_path / "again/complex_of_every_kind_1_summary.json").read_text())["seed"] == 11


def test_predict_alphafold3_json_with_a_template(megafold_bin, source_dir, checkpoint, tmp_path):
    """A protein's template (inline mmCIF, query and template indices) reaches the model; a model
    told to show none says it is not used."""
    template = (source_dir / "tests/fixtures/templates/1ubq.cif").read_text()
    job = {"dialect": "alphafold3", "version": 2, "name": "ubq", "modelSeeds": [1],
           "sequences": [{"protein": {
               "id": "A", "sequence": "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG",
               "templates": [{"mmcif": template, "queryIndices": list(range(24)),
                              "templateIndices": list(range(24))}]}}]}
    path = tmp_path / "ubq.json"
    path.write_text(json.dumps(job))
    shown = run(megafold_bin, "inspect", path, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["chains"][0]["templates"] == ["1ubq_A"]
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", path, "--out", tmp_path / "out",
            "--samples", "1")
    assert r.returncode == 0, r.stderr
    assert "chain A: 1 template(s)" in r.stdout
    assert "not used" not in r.stderr
    assert sample_file(tmp_path / "out", "ubq", 1, 0).exists() and (tmp_path / "out/ubq_model.cif").exists()
    off = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", path, "--out", tmp_path / "off",
              "--samples", "1", "--set", "data.max_templates=0")
    assert off.returncode == 0, off.stderr
    assert "gives templates, but the model" in off.stderr


def test_eval_scores_a_directory_and_skips_bad_files(megafold_bin, source_dir, checkpoint, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("1a8o.cif.gz", "1ubi.pdb.gz"):
        shutil.copy(source_dir / "data/pdb" / name, data / name)
    (data / "broken.cif").write_text("data_broken\n_atom_site.id\n")
    (data / "z").mkdir()
    shutil.copy(source_dir / "data/pdb/1ubi.pdb.gz", data / "z" / "1ubi.pdb.gz")  # the same id again: scored once
    out = tmp_path / "eval.json"
    r = run(megafold_bin, "eval", "--checkpoint", checkpoint, "--data", data, "--out", out, "--max-tokens", "40")
    assert r.returncode == 0, r.stderr
    assert "warning: skipping" in r.stderr and "broken.cif" in r.stderr
    result = json.loads(out.read_text())
    assert [row["entry"] for row in result["rows"]] == ["1a8o", "1ubi"]
    assert all(row["tokens"] <= 40 for row in result["rows"])
    assert 0 <= result["lddt_ca"] <= 1 and 0 <= result["plddt"] <= 100
    assert len(result["skipped"]) == 2 and "entry 1ubi is already scored" in result["skipped"][1]
    assert "lDDT-CA" in r.stdout and "mean" in r.stdout


def test_predict_refuses_an_input_too_large_for_the_device(megafold_bin, checkpoint, tmp_path):
    huge = tmp_path / "huge.fasta"
    huge.write_text(">a\n" + "MKTAYIAKQRQISFVKSHFSRQ" * 40000 + "\n")  # 880k residues: petabytes of pair representation
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", huge, "--out", tmp_path / "out")
    assert r.returncode == 1, r.stderr
    assert "huge: 880000 tokens need at least" in r.stderr and "are available" in r.stderr
    assert not (tmp_path / "out" / "huge_model.cif").exists()


def test_predict_errors_name_the_problem(megafold_bin, source_dir, checkpoint, tmp_path):
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", tmp_path / "x.txt", "--out", tmp_path)
    assert r.returncode == 1 and "unknown input type" in r.stderr
    bad = tmp_path / "bad.fasta"
    bad.write_text(">a\nMK1\n")
    r = run(megafold_bin, "predict", "--checkpoint", checkpoint, "--input", bad, "--out", tmp_path)
    assert r.returncode == 1 and f"{bad}:2:3" in r.stderr
    r = run(megafold_bin, "predict", "--checkpoint", tmp_path / "none.pt", "--input",
            source_dir / "data/pdb/1a8o.cif.gz", "--out", tmp_path)
    assert r.returncode == 1 and "none.pt" in r.stderr
