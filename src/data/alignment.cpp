#include "data/alignment.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/check.h"
#include "data/residue_constants.h"

namespace megafold::data {
namespace {

// BLOSUM62 (Henikoff & Henikoff 1992, the NCBI table) over A R N D C Q E G H I L K M F P S T W
// Y V X: the order of our amino-acid token types (residue_constants.h) followed by X for UNK.
constexpr int kAlphabet = 21;
constexpr std::array<std::array<int8_t, kAlphabet>, kAlphabet> kBlosum62 = {{
    //  A   R   N   D   C   Q   E   G   H   I   L   K   M   F   P   S   T   W   Y   V   X
    {4, -1, -2, -2, 0, -1, -1, 0, -2, -1, -1, -1, -1, -2, -1, 1, 0, -3, -2, 0, 0},           // A
    {-1, 5, 0, -2, -3, 1, 0, -2, 0, -3, -2, 2, -1, -3, -2, -1, -1, -3, -2, -3, -1},          // R
    {-2, 0, 6, 1, -3, 0, 0, 0, 1, -3, -3, 0, -2, -3, -2, 1, 0, -4, -2, -3, -1},              // N
    {-2, -2, 1, 6, -3, 0, 2, -1, -1, -3, -4, -1, -3, -3, -1, 0, -1, -4, -3, -3, -1},         // D
    {0, -3, -3, -3, 9, -3, -4, -3, -3, -1, -1, -3, -1, -2, -3, -1, -1, -2, -2, -1, -2},      // C
    {-1, 1, 0, 0, -3, 5, 2, -2, 0, -3, -2, 1, 0, -3, -1, 0, -1, -2, -1, -2, -1},             // Q
    {-1, 0, 0, 2, -4, 2, 5, -2, 0, -3, -3, 1, -2, -3, -1, 0, -1, -3, -2, -2, -1},            // E
    {0, -2, 0, -1, -3, -2, -2, 6, -2, -4, -4, -2, -3, -3, -2, 0, -2, -2, -3, -3, -1},        // G
    {-2, 0, 1, -1, -3, 0, 0, -2, 8, -3, -3, -1, -2, -1, -2, -1, -2, -2, 2, -3, -1},          // H
    {-1, -3, -3, -3, -1, -3, -3, -4, -3, 4, 2, -3, 1, 0, -3, -2, -1, -3, -1, 3, -1},         // I
    {-1, -2, -3, -4, -1, -2, -3, -4, -3, 2, 4, -2, 2, 0, -3, -2, -1, -2, -1, 1, -1},         // L
    {-1, 2, 0, -1, -3, 1, 1, -2, -1, -3, -2, 5, -1, -3, -1, 0, -1, -3, -2, -2, -1},          // K
    {-1, -1, -2, -3, -1, 0, -2, -3, -2, 1, 2, -1, 5, 0, -2, -1, -1, -1, -1, 1, -1},          // M
    {-2, -3, -3, -3, -2, -3, -3, -3, -1, 0, 0, -3, 0, 6, -4, -2, -2, 1, 3, -1, -1},          // F
    {-1, -2, -2, -1, -3, -1, -1, -2, -2, -3, -3, -1, -2, -4, 7, -1, -1, -4, -3, -2, -2},     // P
    {1, -1, 1, 0, -1, 0, 0, 0, -1, -2, -2, 0, -1, -2, -1, 4, 1, -3, -2, -2, 0},              // S
    {0, -1, 0, -1, -1, -1, -1, -2, -2, -1, -1, -1, -1, -2, -1, 1, 5, -2, -2, 0, 0},          // T
    {-3, -3, -4, -4, -2, -2, -3, -2, -2, -3, -2, -3, -1, 1, -4, -3, -2, 11, 2, -3, -2},      // W
    {-2, -2, -2, -3, -2, -1, -2, -3, 2, -1, -1, -2, -1, 3, -3, -2, -2, 2, 7, -1, -1},        // Y
    {0, -3, -3, -3, -1, -2, -2, -3, -3, 3, 1, -2, 1, -1, -2, -2, 0, -3, -1, 4, -1},          // V
    {0, -1, -1, -1, -2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -2, 0, 0, -2, -1, -1, -1},       // X
}};

int blosum_index(int t) { return t >= 0 && t < kNumAminoAcids ? t : kAlphabet - 1; }

// Traceback states: the alignment's last column is a substitution, a residue of a against a
// gap (gap in b), or a residue of b against a gap (gap in a).
enum State : uint8_t { kSub = 0, kGapB = 1, kGapA = 2 };

// The best of three predecessor scores, ties to the lower state (kSub, then kGapB, then kGapA).
std::pair<int, uint8_t> best_of(int sub, int gap_b, int gap_a) {
  int best = sub;
  uint8_t from = kSub;
  if (gap_b > best) best = gap_b, from = kGapB;
  if (gap_a > best) best = gap_a, from = kGapA;
  return {best, from};
}

}  // namespace

int blosum62(int a, int b) { return kBlosum62[blosum_index(a)][blosum_index(b)]; }

GlobalAlignment align_global(const std::vector<int8_t>& a, const std::vector<int8_t>& b, const GapCosts& gaps) {
  MF_CHECK(gaps.open >= 0 && gaps.extend >= 0, "align_global: gap costs must be >= 0, got open ", gaps.open,
           " extend ", gaps.extend);
  const size_t n = a.size(), m = b.size();
  // Scores far below any reachable one, with room to subtract gap costs without overflow.
  constexpr int kNone = std::numeric_limits<int>::min() / 4;
  const int first = gaps.open + gaps.extend, more = gaps.extend;
  // Scores of the previous and current row per state; the predecessor of every cell and state
  // is kept for the traceback, [n + 1, m + 1] each.
  std::array<std::vector<int>, 3> prev, cur;
  for (auto& v : prev) v.assign(m + 1, kNone);
  for (auto& v : cur) v.assign(m + 1, kNone);
  std::array<std::vector<uint8_t>, 3> from;
  for (auto& v : from) v.assign((n + 1) * (m + 1), kSub);
  auto at = [m](size_t i, size_t j) { return i * (m + 1) + j; };
  prev[kSub][0] = 0;
  for (size_t j = 1; j <= m; ++j) {  // row 0: a leading gap in a
    const auto [s, f] = best_of(prev[kSub][j - 1] - first, kNone, prev[kGapA][j - 1] - more);
    prev[kGapA][j] = s;
    from[kGapA][at(0, j)] = f;
  }
  for (size_t i = 1; i <= n; ++i) {
    for (auto& v : cur) std::fill(v.begin(), v.end(), kNone);
    {
      const auto [s, f] = best_of(prev[kSub][0] - first, prev[kGapB][0] - more, kNone);
      cur[kGapB][0] = s;
      from[kGapB][at(i, 0)] = f;
    }
    for (size_t j = 1; j <= m; ++j) {
      const auto [sub, fs] = best_of(prev[kSub][j - 1], prev[kGapB][j - 1], prev[kGapA][j - 1]);
      cur[kSub][j] = sub + blosum62(a[i - 1], b[j - 1]);
      from[kSub][at(i, j)] = fs;
      const auto [gb, fb] = best_of(prev[kSub][j] - first, prev[kGapB][j] - more, prev[kGapA][j] - first);
      cur[kGapB][j] = gb;
      from[kGapB][at(i, j)] = fb;
      const auto [ga, fa] = best_of(cur[kSub][j - 1] - first, cur[kGapB][j - 1] - first, cur[kGapA][j - 1] - more);
      cur[kGapA][j] = ga;
      from[kGapA][at(i, j)] = fa;
    }
    std::swap(prev, cur);
  }
  GlobalAlignment out;
  out.a_to_b.assign(n, -1);
  auto [score, state] = best_of(prev[kSub][m], prev[kGapB][m], prev[kGapA][m]);
  if (n == 0 && m == 0) score = 0;
  out.score = score;
  for (size_t i = n, j = m; i > 0 || j > 0;) {
    const uint8_t before = from[state][at(i, j)];
    if (state == kSub) {
      out.a_to_b[i - 1] = static_cast<int32_t>(j - 1);
      --i, --j;
    } else if (state == kGapB) {
      --i;
    } else {
      --j;
    }
    state = before;
  }
  return out;
}

}  // namespace megafold::data
