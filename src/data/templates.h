#pragma once
// Structural templates of protein chains (AF3 SI Sec. 2.4; the inputs of Alg. 16): template
// hits read from a per-chain hit list, filtered, and turned into per-residue template features
// from the template structures' mmCIF files.
//
// Hit lists, one per chain: <dir>/<entry>_<chain>.<a3m|sto|m8>[.gz] (author chain id, named
// like the MSAs of msa.h). Every format names a hit's template as <pdbid>_<chain> (the chain's
// author id, as in the PDB's seqres file) and numbers template residues from 1 along the
// chain's full sequence (entity_poly_seq, i.e. label_seq_id):
//  - a3m (hmmsearch's Stockholm turned into a3m, as AF2/AF3's template search writes it):
//    headers ">1abc_A/12-140 mol:protein length:200 ..." or ">1abc_A"; the optional /start-end
//    gives the template residues the hit spans (else it starts at 1). Upper-case letters and
//    '-' are the query's columns (a letter: that query residue aligns to the next template
//    residue; '-': it aligns to none), lower-case letters are template residues inserted
//    between query columns, '.' is skipped. The first record is the query when its name is not
//    a <pdbid>_<chain> hit name.
//  - Stockholm (.sto, as hmmsearch -A writes it): sequence lines "<name>/<start>-<end> <row>",
//    in one or several blocks; #=GS / #=GR / #=GF lines are skipped. The query's columns are,
//    in this order of precedence: the residues of a first row that is not a hit (the query, as
//    in a jackhmmer alignment), the non-gap columns of "#=GC RF" (hmmsearch's match states),
//    else the letters' case as in a3m. A template residue in another column is an insertion.
//  - m8 (BLAST tabular, as MegaFold's and alphafold3-pytorch's caches store hits): query,
//    target <pdbid>_<chain>, pident, alnlen, mismatch, gapopen, qstart, qend, tstart, tend,
//    evalue, bits; '#' lines are comments. No alignment string: the chain's residues in the
//    query span (qstart..qend; unmodelled ones are no tokens and take no part) are aligned to
//    the template span (tstart..tend) globally with BLOSUM62 and affine gaps
//    (data/alignment.h) once the template's sequence is read.
// The query's columns are the chain's full sequence: with a query row, the chain's residues
// must match it either one to one or by residue_index (label_seq_id), as an MSA's query must
// (msa_for_chain); without one (m8, or hit-only a3m/Stockholm), query column k is the residue
// whose residue_index is k + 1, and rows with fewer columns than the chain's last residue_index
// are refused with a warning (they cannot be its residues).
//
// Template structures: <mmcif_dir>/<pdbid>.cif[.gz], or the PDB mirror's layout
// <mmcif_dir>/<middle two characters of the id>/<pdbid>.cif[.gz] (pdbid in lower case). A hit's
// chain is the protein chain whose author chain id equals it, else the one whose label_asym_id
// does. Template residue k is label_seq_id k of that chain: its token type (the 20 amino acids,
// MSE as MET, anything else UNK) and its N, CA, C and CB atoms (CA for glycine, the pseudo-beta
// atom) from the first model, per atom the highest-occupancy altloc (the first on ties).
//
// Filters, applied to each chain's hits in file order (the rank); the first kMaxTemplateHits
// hits that pass are kept:
//  - self-hits: a template whose PDB id is the entry's own (entry_pdb_id) is dropped, so a
//    training example never sees its own structure;
//  - release date (the earliest pdbx_audit_revision_history.revision_date): a template
//    released after the maximum date, or on or after the day the entry was deposited
//    (Entry::deposition_date, which precedes its release), is dropped, so a training example
//    only sees structures that existed before it, as AF3 filters templates by the query's date
//    (SI 2.4); where either date applies, a template without a revision date cannot be checked
//    (a deposition date would not do: a structure deposited before a date may be released
//    after it) and counts as unusable;
//  - short hits: fewer than kMinTemplateAligned of the chain's residues aligned to a template
//    residue;
//  - near-duplicates of the query: more than 95% identity over more than 95% of the chain's
//    residues (AF2 SI 1.2.3: duplicates of the query in the PDB would teach copying);
//  - unusable hits (never fatal for the entry, one warning per hit file with counts and the
//    first hit of each reason): a malformed record, a missing or unreadable template mmCIF, no
//    protein chain of that id, template residues outside the chain, a template residue whose
//    letter in the hit differs from the structure's (the numbering does not match), or no
//    release date where a maximum date is given.
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace megafold::data {

inline constexpr int kTemplateAtoms = 4;          // N, CA, C, CB
inline constexpr int kMaxTemplateHits = 20;       // kept per chain (AF3 SI 2.4)
inline constexpr int kMinTemplateAligned = 10;    // aligned residues a hit needs
inline constexpr double kDuplicateIdentity = 0.95, kDuplicateCoverage = 0.95;

// One template of one chain of an entry, over that chain's residues (a per-atom residue counts
// once: the chain's MSA columns, msa_features.h chain_columns).
struct ChainTemplate {
  std::string name;              // the template chain, "<pdbid>_<chain>" ("1abc_A")
  std::vector<int8_t> restype;   // [n_res] token type of the template residue aligned to residue i,
                                 //         kGapToken where the hit aligns none
  std::vector<float> coords;     // [n_res, kTemplateAtoms, 3] Angstrom: N, CA, C, CB (CA for glycine)
  std::vector<uint8_t> mask;     // [n_res, kTemplateAtoms] 1 = that atom is resolved in the template
  int64_t size() const { return static_cast<int64_t>(restype.size()); }
};

// The protein chains of one template structure (read by structure_io.cpp, the gemmi unit).
struct TemplateStructure {
  struct Chain {
    std::string author_id, label_id;  // auth_asym_id, label_asym_id
    std::vector<int8_t> restype;      // [n] residue k + 1 (label_seq_id): token type, UNK if unknown
    std::vector<float> coords;        // [n, kTemplateAtoms, 3] Angstrom
    std::vector<uint8_t> mask;        // [n, kTemplateAtoms]
    int64_t size() const { return static_cast<int64_t>(restype.size()); }
  };
  std::string id;            // the entry id in lower case ("1abc")
  std::string release_date;  // YYYY-MM-DD, "" if the file records none (see the date filter)
  std::vector<Chain> chains;
  // The chain whose author id is `id`, else the one whose label_asym_id is; nullptr if none.
  const Chain* find_chain(const std::string& id) const;
};

// Reads a template structure from an mmCIF file (plain or gzip) or from mmCIF text. A chain's
// length is its entity_poly_seq's (or its highest label_seq_id without one); residues without
// coordinates keep their sequence's type and mask 0. Throws megafold::Error naming `path` /
// `origin` when the text is not mmCIF or has no model.
TemplateStructure read_template_structure(const std::string& path);
TemplateStructure parse_template_structure(const std::string& text, const std::string& origin);

// The template mmCIF of PDB id `pdb_id` under `dir` (see the header comment); "" if none exists.
std::string find_template_mmcif(const std::string& dir, const std::string& pdb_id);

// One hit as a hit list gives it.
struct TemplateHit {
  std::string pdb_id;  // lower case, "1abc"
  std::string chain;   // "A"
  int line = 0;        // the line its record starts on (1-based)
  // a3m and Stockholm: the aligned pairs, query column (0-based) -> template residue number
  // (1-based), with the template residue's type as the hit writes it (-1 where it is no
  // amino-acid letter). Empty for m8 hits.
  struct Pair {
    int32_t query = 0, residue = 0;
    int8_t type = -1;
  };
  std::vector<Pair> pairs;
  // m8: the aligned spans, 1-based and inclusive; aligned once the template is read.
  bool spans_only = false;
  int32_t query_start = 0, query_end = 0, template_start = 0, template_end = 0;
  std::string name() const { return pdb_id + "_" + chain; }
};

struct TemplateHits {
  std::vector<TemplateHit> hits;       // in file order (rank)
  std::vector<int8_t> query;           // the query row's token types; empty when the file has none
  std::vector<std::string> malformed;  // "line N: why" for each record left out
  int32_t columns = -1;                // query columns of the a3m / Stockholm rows (-1: m8, or no hit)
};

enum class TemplateFormat { kA3m, kStockholm, kM8 };

// Parses a hit list; `origin` names it in errors. A malformed record is left out and listed in
// `malformed`; a file whose layout is broken as a whole (Stockholm rows of unequal length, a
// query row that is not a protein sequence) throws megafold::Error naming `origin`.
TemplateHits parse_template_hits(std::string_view text, const std::string& origin, TemplateFormat format);
// Reads a hit list (plain or gzip), its format from the name: .a3m, .sto, .m8 (then .gz).
TemplateHits load_template_hits(const std::string& path);

struct Entry;  // data/structure.h, which holds each chain's templates

// The PDB id an entry name stands for ("1abc" for "1abc", "1ABC", "1abc-assembly1"), "" if its
// first four characters are no PDB id or run on into more letters or digits.
std::string entry_pdb_id(const std::string& name);

// True for a date written YYYY-MM-DD (digits), the form mmCIF and the date filter use.
bool is_release_date(const std::string& date);

struct TemplateOptions {
  std::string hits;              // directory of <entry>_<chain>.<a3m|sto|m8>[.gz] hit lists
  std::string mmcif;             // directory of the template structures (header comment)
  std::string max_release_date;  // YYYY-MM-DD, "" = no date filter
};

// Template structures read while building a cache, shared by its worker threads, so that a
// structure the hits of many entries name (lysozyme, a kinase domain) is parsed once rather
// than once per entry: at most `capacity` structures (or failed reads, kept as their reason)
// are held, the least recently used dropped first. Thread-safe; a structure two threads miss
// at once may be read twice, and either copy is kept.
inline constexpr size_t kTemplateStructuresKept = 4096;  // about 70 KB each for 1000 residues
class TemplateStructureCache {
 public:
  explicit TemplateStructureCache(size_t capacity = kTemplateStructuresKept) : capacity_(capacity) {}
  // The structure of PDB id `pdb_id` under `mmcif_dir` (find_template_mmcif), or nullptr with
  // the reason in `why` (no file, or a file that cannot be read).
  std::shared_ptr<const TemplateStructure> get(const std::string& mmcif_dir, const std::string& pdb_id, std::string& why);
  size_t reads() const { return reads_; }  // files parsed so far

 private:
  struct Kept {
    std::shared_ptr<const TemplateStructure> structure;  // null: the read failed
    std::string why;
    std::list<std::string>::iterator age;  // its place in used_, most recent first
  };
  size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<std::string, Kept> kept_;  // by mmcif_dir + '/' + pdb_id
  std::list<std::string> used_;
  std::atomic<size_t> reads_{0};
};

// What attach_templates did with the hits it read (summed over the entry's chains).
struct TemplateCounts {
  int64_t read = 0, kept = 0;
  int64_t self = 0, released_later = 0, short_hits = 0, duplicates = 0;  // filtered
  int64_t unusable = 0;  // malformed, no structure, no chain, numbering mismatch, no revision date
};

// Fills e.templates (one list per chain, kMaxTemplateHits at most, in rank order) from each
// protein chain's hit list in options.hits; chains without one, and other molecule types, get
// none. Whatever cannot be used is counted and reported in `warnings`, one line per hit file
// naming it (never fatal). Throws megafold::Error only for an invalid max_release_date.
// structures: where template structures are looked up and kept (a cache build shares one
// among its workers); null reads each one once for this entry.
TemplateCounts attach_templates(Entry& e, const TemplateOptions& options, std::vector<std::string>& warnings,
                                TemplateStructureCache* structures = nullptr);

// The template named `name` of a chain of n_residues residues from an explicit alignment:
// chain residue query[j] aligns to residue templ[j] of `chain` (both 0-based; AlphaFold 3 JSON's
// queryIndices / templateIndices). Throws megafold::Error naming `field` + ".queryIndices" or
// ".templateIndices" when the lists differ in length, an index is out of range, or a query
// residue appears twice.
ChainTemplate template_from_indices(const std::string& name, const TemplateStructure::Chain& chain, int64_t n_residues,
                                    const std::vector<int64_t>& query, const std::vector<int64_t>& templ,
                                    const std::string& field);

// The number of residues of each chain of e (the length its templates and MSA have).
std::vector<int64_t> chain_residue_counts(const Entry& e);

// Which templates a batch shows (AF3 SI 2.4). Training (random): per chain, k uniform in
// {0, ..., min(max_templates, n_hits)}, then k of its hits drawn uniformly without replacement
// and kept in rank order, a pure function of the seed (chain c draws with mix_seed(seed, c)).
// Inference and validation: the top min(max_templates, n_hits). max_templates 0: none.
struct TemplateSampling {
  int64_t max_templates = 4;
  bool random = false;
  uint64_t seed = 0;
};

// Per chain of e, the indices into e.templates[c] of the templates shown, in rank order.
std::vector<std::vector<int32_t>> select_templates(const Entry& e, const TemplateSampling& sampling);

// The template restricted to `columns` (indices into their residues, in the given order).
ChainTemplate template_columns(const ChainTemplate& t, const std::vector<int64_t>& columns);

}  // namespace megafold::data
