#!/usr/bin/env python3
"""Converts the wwPDB Chemical Component Dictionary (CCD) into the compact binary table that
megafold maps at run time (src/data/ccd.h documents the layout): per component its type,
parent residue and one-letter code; per heavy atom its name, element, formal charge, leaving
flag and ideal coordinates (pdbx_model_Cartn_*_ideal, else the model coordinates, else none);
the bonds between heavy atoms.

Source: the CCD as shipped in the biotite wheel (biotite/structure/info/components.bcif,
`pip install biotite==1.6.0`). The CCD is distributed by the wwPDB under CC0 1.0.

usage: python3 data/reference/make_ccd.py OUT   (scripts/setup.sh runs it once per machine)
"""
import os
import struct
import sys

import numpy as np
import biotite
from biotite.structure.info.ccd import get_ccd

MAGIC = b"MFCCD\x00\x00\x01"
VERSION = 1
ELEMENTS = ("X H HE LI BE B C N O F NE NA MG AL SI P S CL AR K CA SC TI V CR MN FE CO NI CU ZN GA GE AS "
            "SE BR KR RB SR Y ZR NB MO TC RU RH PD AG CD IN SN SB TE I XE CS BA LA CE PR ND PM SM EU GD "
            "TB DY HO ER TM YB LU HF TA W RE OS IR PT AU HG TL PB BI PO AT RN FR RA AC TH PA U NP PU AM "
            "CM BK CF ES FM MD NO LR RF DB SG BH HS MT DS RG CN NH FL MC LV TS OG").split()
Z = {s: z for z, s in enumerate(ELEMENTS)}
# Component kinds (ccd.h: CcdKind).
NON_POLYMER, PEPTIDE, RNA, DNA, SACCHARIDE, OTHER = range(6)


def kind_of(chem_type):
    t = chem_type.upper()
    if "PEPTIDE" in t and "LIKE" not in t:
        return PEPTIDE
    if "RNA" in t:
        return RNA
    if "DNA" in t:
        return DNA
    if "SACCHARIDE" in t:
        return SACCHARIDE
    if t == "NON-POLYMER":
        return NON_POLYMER
    return OTHER


def column(cat, name, dtype=None, masked=None):
    col = cat[name]
    return col.as_array(dtype, masked) if dtype is not None else col.as_array()


def main(out):
    ccd = get_ccd()
    comp = ccd["chem_comp"]
    ids = column(comp, "id")
    types = column(comp, "type")
    parents = column(comp, "mon_nstd_parent_comp_id")
    letters = column(comp, "one_letter_code")

    atoms = ccd["chem_comp_atom"]
    a_comp = column(atoms, "comp_id")
    a_name = column(atoms, "atom_id")
    a_el = np.char.upper(column(atoms, "type_symbol").astype(str))
    a_charge = column(atoms, "charge", np.float64, 0.0)
    a_leave = column(atoms, "pdbx_leaving_atom_flag")
    ideal = np.stack([column(atoms, f"pdbx_model_Cartn_{c}_ideal", np.float64, np.nan) for c in "xyz"], 1)
    model = np.stack([column(atoms, f"model_Cartn_{c}", np.float64, np.nan) for c in "xyz"], 1)
    heavy = ~np.isin(a_el, ["H", "D"])

    bonds = ccd["chem_comp_bond"]
    b_comp = column(bonds, "comp_id")
    b_1 = column(bonds, "atom_id_1")
    b_2 = column(bonds, "atom_id_2")

    # Atom and bond rows are grouped by component in CCD order; index the groups.
    def groups(keys):
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        ends = np.r_[starts[1:], len(keys)]
        return {keys[s]: (s, e) for s, e in zip(starts, ends)}

    atom_rows, bond_rows = groups(a_comp), groups(b_comp)
    order = np.argsort(np.array([i.encode() for i in ids], dtype=object))

    comp_bytes, atom_bytes, bond_bytes = bytearray(), bytearray(), bytearray()
    n_atoms = n_bonds = 0
    for k in order:
        cid = ids[k]
        s, e = atom_rows.get(cid, (0, 0))
        rows = [r for r in range(s, e) if heavy[r]]
        index = {a_name[r]: i for i, r in enumerate(rows)}
        if len(rows) > 65535 or len(cid) > 8 or any(len(a_name[r]) > 4 for r in rows):
            continue  # outside the table's field widths (no such component in the CCD today)
        first_atom, first_bond = n_atoms, n_bonds
        for r in rows:
            flags = 1 if a_leave[r] == "Y" else 0
            xyz = ideal[r]
            if np.isnan(xyz).any():
                xyz = model[r]
                flags |= 2
            if np.isnan(xyz).any():
                xyz = np.zeros(3)
                flags |= 4
            atom_bytes += struct.pack("<4sBbBx3f", a_name[r].encode(), Z.get(a_el[r], 0),
                                      int(a_charge[r]), flags, *xyz)
            n_atoms += 1
        bs, be = bond_rows.get(cid, (0, 0))
        count = 0
        for r in range(bs, be):
            i, j = index.get(b_1[r]), index.get(b_2[r])
            if i is None or j is None:
                continue  # a bond to a hydrogen
            bond_bytes += struct.pack("<HH", i, j)
            count += 1
        n_bonds += count
        parent = parents[k] if parents[k] not in ("?", ".") else ""
        letter = letters[k] if len(letters[k]) == 1 and letters[k] not in ("?", ".") else "\0"
        comp_bytes += struct.pack("<8s8sIIHHBcxx", cid.encode(), parent.split(",")[0].encode()[:8],
                                  first_atom, first_bond, len(rows), count, kind_of(types[k]),
                                  letter.encode())
    n_comp = len(comp_bytes) // 32
    source = f"wwPDB CCD via biotite {biotite.__version__}".encode()[:40]
    header = struct.pack("<8sIIII40s", MAGIC, VERSION, n_comp, n_atoms, n_bonds, source)
    tmp = out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(header + comp_bytes + atom_bytes + bond_bytes)
    os.replace(tmp, out)
    print(f"make_ccd: {n_comp} components, {n_atoms} heavy atoms, {n_bonds} bonds -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
