// The fused Sparsifiner inference kernel: fused_forward, called by bab.sparsifiner.fused, which compiles this file
// on first use (torch.utils.cpp_extension.load). The algorithm and its exactness argument are in that module's
// docstring; the comments here say why each loop is written the way it is (mostly: so that g++ -O3 vectorizes it).

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace {

// exp(x) for x <= 0 (softmax after subtracting the row maximum): Cephes' expf polynomial, written without
// calls so that the loop using it vectorizes (std::exp does not without -ffast-math). Error ~1 ulp.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n as a float's exponent field
  return p * __builtin_bit_cast(float, bits);  // (memcpy here keeps g++ from vectorizing the calling loop)
}

// A float as an unsigned integer with the same order (x < y <=> ordered(x) < ordered(y)). Adding +0 turns
// -0 into +0, so equal floats give equal integers.
inline uint32_t ordered(float x) {
  x += 0.0f;
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kPad = 16;  // room for one full vector load or store past the end of the working buffers

// How many of u[0..c) are >= t (t >= 1; u padded to a multiple of 16 with zeros).
inline int count_at_least_u(const uint32_t* u, int c, uint32_t t) {
  int count = 0;
#ifdef __AVX512F__
  const __m512i bound = _mm512_set1_epi32(static_cast<int>(t));
  for (int i = 0; i < c; i += 16)
    count += __builtin_popcount(_mm512_cmpge_epu32_mask(_mm512_loadu_si512(u + i), bound));
#else
#pragma omp simd reduction(+ : count)
  for (int i = 0; i < c; ++i) count += u[i] >= t ? 1 : 0;
#endif
  return count;
}

// The smallest and the largest of u[0..c) (c >= 1).
inline void min_max_u(const uint32_t* u, int c, uint32_t& low, uint32_t& high) {
  low = high = u[0];
  int i = 0;
#ifdef __AVX512F__
  if (c >= 16) {
    __m512i lo = _mm512_loadu_si512(u), hi = lo;
    for (i = 16; i + 16 <= c; i += 16) {
      const __m512i x = _mm512_loadu_si512(u + i);
      lo = _mm512_min_epu32(lo, x);
      hi = _mm512_max_epu32(hi, x);
    }
    low = _mm512_reduce_min_epu32(lo);
    high = _mm512_reduce_max_epu32(hi);
  }
#endif
  for (; i < c; ++i) {
    low = std::min(low, u[i]);
    high = std::max(high, u[i]);
  }
}

// Keeps the values of u[0..c) in [low, high] (in place, order kept); returns how many, and in `above` how many
// were larger than high.
int keep_between(uint32_t* u, int c, uint32_t low, uint32_t high, int& above) {
  int kept = 0;
  above = 0;
#ifdef __AVX512F__
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(low)), hi = _mm512_set1_epi32(static_cast<int>(high));
  for (int i = 0; i < c; i += 16) {  // in place: kept <= i, so a store never overtakes the loads
    const __m512i x = _mm512_loadu_si512(u + i);
    // lanes past c hold padding zeros, which low = 0 would keep
    const __mmask16 valid = c - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (c - i)) - 1);
    const __mmask16 over = _mm512_cmpgt_epu32_mask(x, hi) & valid;
    const __mmask16 keep = _mm512_cmpge_epu32_mask(x, lo) & valid & static_cast<__mmask16>(~over);
    _mm512_storeu_si512(u + kept, _mm512_maskz_compress_epi32(keep, x));
    kept += __builtin_popcount(keep);
    above += __builtin_popcount(over);
  }
#else
  for (int i = 0; i < c; ++i) {
    const uint32_t x = u[i];
    u[kept] = x;
    kept += (x >= low && x <= high) ? 1 : 0;
    above += x > high ? 1 : 0;
  }
#endif
  return kept;
}

// The k-th largest of u[0..c) (1 <= k <= c; u has c + kPad room and is overwritten), exactly: the largest T with
// count(u >= T) >= k, fixed bit by bit from the top by counting passes that vectorize. The bits above the
// highest one where the smallest and the largest value differ are T's already (scores of one row mostly share
// sign and exponent), so bisection starts below them; every 4 bits only the values sharing T's prefix are kept
// (the larger ones counted), so after a few passes the rest read one or two vectors.
uint32_t kth_largest(uint32_t* u, int c, int k) {
  uint32_t low, high;
  min_max_u(u, c, low, high);
  if (low == high) return low;
  const int first = 31 - __builtin_clz(low ^ high);  // the highest bit where values differ
  uint32_t t = first == 31 ? 0u : low & ~((2u << first) - 1);
  std::fill(u + c, u + c + kPad, 0u);
  int since = 0;
  for (int bit = first; bit >= 0; --bit) {
    const uint32_t candidate = t | (1u << bit);
    if (count_at_least_u(u, c, candidate) >= k) t = candidate;
    if (++since == 4 && bit > 0 && c > 16) {  // keep t <= u <= t | (2^bit - 1); count and drop those above
      int above;
      c = keep_between(u, c, t, t | ((1u << bit) - 1), above);
      k -= above;
      std::fill(u + c, u + c + kPad, 0u);
      since = 0;
    }
  }
  return t;
}

// Keeps the nonzero entries of x[0..n): values to values[], positions to ids[] (both with n + kPad room);
// returns how many. AVX-512 compresses 16 at a time; elsewhere a branch-free scalar loop.
int compact_nonzero(const float* x, int n, const int32_t* positions, float* values, int32_t* ids) {
  int c = 0, j = 0;
#ifdef __AVX512F__
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_OQ);
    _mm512_storeu_ps(values + c, _mm512_maskz_compress_ps(keep, v));
    _mm512_storeu_si512(ids + c, _mm512_maskz_compress_epi32(keep, _mm512_loadu_si512(positions + j)));
    c += __builtin_popcount(keep);
  }
#endif
  for (; j < n; ++j) {
    values[c] = x[j];
    ids[c] = positions[j];
    c += x[j] != 0.0f ? 1 : 0;
  }
  return c;
}

// One basis W~_up [n_down, n] (one head, or one head of one example), pruned here from the raw W_up columns
// as ConnectivityPredictor.sparse_basis does: |w| with basis_abs, then entries with |w| < up_prune set to 0.
// Kept dense (for the secondary score, read by key) and as CSR rows (for the primary score, accumulated over the
// nonzero entries of the nonzero coefficients' rows only).
struct Basis {
  int n_down = 0, n = 0;
  std::vector<int32_t> start, col;
  std::vector<float> dense, val;
  std::vector<int32_t> positions;  // 0, 1, ..., n + kPad - 1

  void build(const float* w_up, int rows, int cols, float up_prune, bool basis_abs) {
    n_down = rows;
    n = cols;
    const size_t size = static_cast<size_t>(rows) * cols;
    dense.resize(size);
    col.resize(size + kPad);  // the CSR arrays are filled in place, at most every entry
    val.resize(size + kPad);
    start.assign(rows + 1, 0);
#pragma omp simd
    for (size_t e = 0; e < size; ++e) {
      const float x = basis_abs ? std::fabs(w_up[e]) : w_up[e];
      dense[e] = std::fabs(x) >= up_prune ? x : 0.0f;
    }
    positions.resize(cols + kPad);
    for (int j = 0; j < cols + kPad; ++j) positions[j] = j;
    int nnz = 0;
    for (int m = 0; m < rows; ++m) {
      nnz += compact_nonzero(dense.data() + static_cast<size_t>(m) * cols, cols, positions.data(), val.data() + nnz,
                             col.data() + nnz);
      start[m + 1] = nnz;
    }
  }
};

// Per-thread buffers, sized once per call.
struct Scratch {
  std::vector<double> score, secondary, group_score;
  std::vector<float> rounded, scores, values;
  std::vector<int32_t> ids, others, in, unsure, same, same2, all_keys;
  std::vector<uint32_t> order, work;

  Scratch(int n)
      : score(n + kPad), secondary(n + kPad), group_score(n + kPad), rounded(n + kPad), scores(n + kPad),
        values(n + kPad), ids(n + kPad), others(n + kPad), in(n + kPad), unsure(n + kPad), same(n + kPad), same2(n + kPad),
        all_keys(n + kPad), order(n + kPad), work(n + kPad) {
    for (int j = 0; j < n + kPad; ++j) all_keys[j] = j;
  }
};

inline float dot(const float* a, const float* b, int len) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int e = 0; e < len; ++e) acc += a[e] * b[e];
  return acc;
}

// Rounds score[0..n) to float and keeps the keys whose rounded score is positive: their rounded scores in
// values[], their positions in ids[] (both need n + kPad room); returns how many. One pass over the doubles
// (AVX-512: 8 at a time, converted and compressed in registers); elsewhere branch-free scalar.
int positive_rounded(const double* score, int n, const int32_t* positions, float* values, int32_t* ids) {
  int c = 0, j = 0;
#if defined(__AVX512F__) && defined(__AVX512VL__)  // 256-bit compress and mask compares need VL
  const __m256 zero = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm512_cvtpd_ps(_mm512_loadu_pd(score + j));
    const __mmask8 keep = _mm256_cmp_ps_mask(v, zero, _CMP_GT_OQ);
    _mm256_storeu_ps(values + c, _mm256_maskz_compress_ps(keep, v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids + c),
                        _mm256_maskz_compress_epi32(keep, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(positions + j))));
    c += __builtin_popcount(keep);
  }
#endif
  for (; j < n; ++j) {
    const float x = static_cast<float>(score[j]);
    values[c] = x;
    ids[c] = positions[j];
    c += x > 0.0f ? 1 : 0;
  }
  return c;
}

// The positions of the entries of x[0..n) at or below `ceiling`, to ids[] (n + kPad room); returns how many.
int compact_at_most(const float* x, int n, float ceiling, const int32_t* positions, int32_t* ids) {
  int c = 0, j = 0;
#ifdef __AVX512F__
  const __m512 bound = _mm512_set1_ps(ceiling);
  for (; j + 16 <= n; j += 16) {
    const __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + j), bound, _CMP_LE_OQ);
    _mm512_storeu_si512(ids + c, _mm512_maskz_compress_epi32(keep, _mm512_loadu_si512(positions + j)));
    c += __builtin_popcount(keep);
  }
#endif
  for (; j < n; ++j) {
    ids[c] = positions[j];
    c += x[j] <= ceiling ? 1 : 0;
  }
  return c;
}

// Splits ids[0..c) by their ordered values u: ids with u > t to `in`, ids with u == t to `tied` (both with
// c + kPad room); returns the two counts. Branch-free: at keep rates near 1/2 the comparisons are coin flips.
std::pair<int, int> split_at(const uint32_t* u, const int32_t* ids, int c, uint32_t t, int32_t* in, int32_t* tied) {
  int above = 0, equal = 0, i = 0;
#ifdef __AVX512F__
  const __m512i bound = _mm512_set1_epi32(static_cast<int>(t));
  for (; i + 16 <= c; i += 16) {
    const __m512i x = _mm512_loadu_si512(u + i), id = _mm512_loadu_si512(ids + i);
    const __mmask16 over = _mm512_cmpgt_epu32_mask(x, bound), same = _mm512_cmpeq_epu32_mask(x, bound);
    _mm512_storeu_si512(in + above, _mm512_maskz_compress_epi32(over, id));
    _mm512_storeu_si512(tied + equal, _mm512_maskz_compress_epi32(same, id));
    above += __builtin_popcount(over);
    equal += __builtin_popcount(same);
  }
#endif
  for (; i < c; ++i) {
    in[above] = ids[i];
    above += u[i] > t ? 1 : 0;
    tied[equal] = ids[i];
    equal += u[i] == t ? 1 : 0;
  }
  return {above, equal};
}

// The primary score S_j = sum_m coeff[m] W~_up[m, j] of every key j, in double: the nonzero coefficients in
// increasing m, each over the nonzero entries of its basis row. These are the additions of
// predictor.ranking_scores in its order (a product of two floats is exact in double; the zero terms it adds
// besides change no sum), so the result is the torch path's, bit for bit. A plain loop on purpose: no simd
// reduction, which would reorder the additions.
void primary_scores(const float* coeff, const Basis& b, double* score) {
  std::fill(score, score + b.n, 0.0);
  for (int m = 0; m < b.n_down; ++m) {
    if (coeff[m] == 0.0f) continue;
    const double cm = coeff[m];
    for (int e = b.start[m]; e < b.start[m + 1]; ++e) score[b.col[e]] += cm * static_cast<double>(b.val[e]);
  }
}

// GCC/Clang vectors of 8 doubles and 8 floats.
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

// p[0..8) as doubles (exactly).
inline v8d widen8(const float* p) {
  v8f x;
  std::memcpy(&x, p, sizeof x);
  return __builtin_convertvector(x, v8d);
}

// The secondary score T_j = sum_m a[m] W~_up[m, j] (the unthresholded coefficients) of the keys ids[0..cnt),
// written to by_id[j]: in double and in increasing m, as ranking_scores adds them (a fused multiply-add rounds
// the same exact product once). A large group (a row whose k-th score is 0, shared by most keys) takes every
// key's T at once, an axpy per basis row that vectorizes over the keys; a small one gathers its keys' entries.
void secondary_scores(const float* a, const Basis& b, const int32_t* ids, int cnt, double* by_id) {
  const int n = b.n;
  if (4 * cnt > n) {
    int j = 0;
    for (; j + 32 <= n; j += 32) {  // 32 keys' sums in registers over all rows m, instead of 32 passes over memory
      v8d s0 = {}, s1 = {}, s2 = {}, s3 = {};
      for (int m = 0; m < b.n_down; ++m) {
        const double am = a[m];
        const float* row = b.dense.data() + static_cast<size_t>(m) * n + j;
        s0 += am * widen8(row);
        s1 += am * widen8(row + 8);
        s2 += am * widen8(row + 16);
        s3 += am * widen8(row + 24);
      }
      const v8d sums[4] = {s0, s1, s2, s3};
      std::memcpy(by_id + j, sums, sizeof sums);
    }
    for (; j < n; ++j) {
      double sum = 0.0;
      for (int m = 0; m < b.n_down; ++m) sum += static_cast<double>(a[m]) * b.dense[static_cast<size_t>(m) * n + j];
      by_id[j] = sum;
    }
    return;
  }
  for (int t = 0; t < cnt; ++t) by_id[ids[t]] = 0.0;
  for (int m = 0; m < b.n_down; ++m) {
    const double am = a[m];
    const float* row = b.dense.data() + static_cast<size_t>(m) * n;
    for (int t = 0; t < cnt; ++t) by_id[ids[t]] += am * static_cast<double>(row[ids[t]]);
  }
}

// Picks `need` (1 <= need <= g) of the keys ids[0..g) with the largest key[id] (doubles, indexed by key). Writes
// the keys it is sure of to out and returns how many; when more keys share the last place's exact value than
// places are left, those keys go to tied[] (their count in `ties`, else 0) for the next criterion to rank.
//
// Rounded to float, a double keeps its order (a larger float means a larger double), so the need-th largest
// float, found with the fast selection on 32-bit keys, splits the keys into sure winners (above it), sure
// losers (below) and a group equal to it, usually one key; only that group is compared in double.
int pick_largest(const int32_t* ids, int g, int need, const double* key, Scratch& s, int64_t* out, int32_t* tied,
                 int& ties, const float* rounded = nullptr) {
  uint32_t *u = s.order.data(), *work = s.work.data();
  if (rounded != nullptr) {  // the keys' rounded values, in the order of ids (read in sequence, not gathered)
#pragma omp simd
    for (int t = 0; t < g; ++t) u[t] = work[t] = ordered(rounded[t]);
  } else {
    for (int t = 0; t < g; ++t) u[t] = work[t] = ordered(static_cast<float>(key[ids[t]]));
  }
  const uint32_t cut = kth_largest(work, g, need);
  int32_t *in = s.in.data(), *group = s.unsure.data();
  const auto [above, equal] = split_at(u, ids, g, cut, in, group);
  for (int t = 0; t < above; ++t) out[t] = in[t];
  int filled = above;
  ties = 0;
  const int rest = need - above;  // 1 <= rest <= equal: cut is the need-th largest
  if (equal == rest) {
    for (int t = 0; t < equal; ++t) out[filled++] = group[t];
    return filled;
  }
  double* exact = s.group_score.data();
  double low = key[group[0]], high = low;
  for (int t = 0; t < equal; ++t) {
    exact[t] = key[group[t]];
    low = std::min(low, exact[t]);
    high = std::max(high, exact[t]);
  }
  if (low == high) {  // the whole group ties exactly (e.g. S = 0 for every key no nonzero coefficient reaches)
    std::copy(group, group + equal, tied);
    ties = equal;
    return filled;
  }
  std::nth_element(exact, exact + rest - 1, exact + equal, std::greater<double>());
  const double last = exact[rest - 1];  // the rest-th largest exact key of the group
  for (int t = 0; t < equal; ++t) {
    const double x = key[group[t]];
    if (x > last) out[filled++] = group[t];
    else if (x == last) tied[ties++] = group[t];
  }
  if (ties == need - filled) {  // no tie at the last place after all
    for (int t = 0; t < ties; ++t) out[filled++] = tied[t];
    ties = 0;
  }
  return filled;
}

// The k keys of one query by the ranking rule of bab.sparsifiner.predictor (module docstring): the largest
// primary scores S; where keys tie at the k-th place, the largest secondary scores T among them; then the lower
// index. With at least k positive scores (the candidates: keys touched by a nonzero coefficient's basis row)
// the top k is among them and the other keys are never read; otherwise every key takes part.
void select_row(const float* coeff, const float* a, const Basis& b, int k, Scratch& s, int64_t* out) {
  const int n = b.n;
  double* score = s.score.data();
  primary_scores(coeff, b, score);
  const int c = positive_rounded(score, n, s.all_keys.data(), s.values.data(), s.ids.data());
  int32_t *tied = s.same.data(), *still_tied = s.same2.data();
  int ties = 0, filled = 0;
  if (c >= k) {
    filled = pick_largest(s.ids.data(), c, k, score, s, out, tied, ties, s.values.data());
  } else {  // every positive score is in; the best of the other keys (scores <= 0) take the k - c places left
    for (int t = 0; t < c; ++t) out[t] = s.ids[t];
    float* rounded = s.rounded.data();
#pragma omp simd
    for (int j = 0; j < n; ++j) rounded[j] = static_cast<float>(score[j]);
    const int others = compact_at_most(rounded, n, 0.0f, s.all_keys.data(), s.others.data());
    filled = c + pick_largest(s.others.data(), others, k - c, score, s, out + c, tied, ties);
  }
  if (filled == k) return;
  double* secondary = s.secondary.data();
  secondary_scores(a, b, tied, ties, secondary);
  int last_ties = 0;
  filled += pick_largest(tied, ties, k - filled, secondary, s, out + filled, still_tied, last_ties);
  if (filled == k) return;
  const int rest = k - filled;  // the lowest indices of the keys tied in S and T
  std::nth_element(still_tied, still_tied + rest - 1, still_tied + last_ties);
  for (int t = 0; t < rest; ++t) out[filled + t] = still_tied[t];
}

// GCC/Clang vector of 16 floats: one AVX-512 register with -march=native, split into narrower ones elsewhere.
typedef float v16 __attribute__((vector_size(64)));

inline v16 load16(const float* p) {
  v16 x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

inline float sum16(v16 x) {
#ifdef __AVX512F__
  __m512 r;
  std::memcpy(&r, &x, sizeof r);
  return _mm512_reduce_add_ps(r);  // a shuffle tree, not a chain of 16 dependent adds
#else
  float total = 0.0f;
  for (int e = 0; e < 16; ++e) total += x[e];
  return total;
#endif
}

// The four horizontal sums of a0..a3 together: halves added, then two rounds of pairwise adds (hadd), ~12
// instructions instead of four separate reduction trees (~32).
inline void sum16x4(v16 a0, v16 a1, v16 a2, v16 a3, float& s0, float& s1, float& s2, float& s3) {
#ifdef __AVX512F__
  auto halves = [](v16 x) {
    __m512 r;
    std::memcpy(&r, &x, sizeof r);
    const __m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r), 1));  // AVX512F only
    return _mm256_add_ps(_mm512_castps512_ps256(r), upper);
  };
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(halves(a0), halves(a1)), _mm256_hadd_ps(halves(a2), halves(a3)));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));  // (s0, s1, s2, s3)
  float lanes[4];
  _mm_storeu_ps(lanes, sums);
  s0 = lanes[0];
  s1 = lanes[1];
  s2 = lanes[2];
  s3 = lanes[3];
#else
  s0 = sum16(a0);
  s1 = sum16(a1);
  s2 = sum16(a2);
  s3 = sum16(a3);
#endif
}

// q . K[j] for four keys at once: four independent accumulator chains instead of one long one.
inline void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3, int d,
                 float* out) {
  v16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int e = 0;
  for (; e + 16 <= d; e += 16) {
    const v16 x = load16(q + e);
    a0 += x * load16(k0 + e);
    a1 += x * load16(k1 + e);
    a2 += x * load16(k2 + e);
    a3 += x * load16(k3 + e);
  }
  float s0, s1, s2, s3;
  sum16x4(a0, a1, a2, a3, s0, s1, s2, s3);
  for (; e < d; ++e) {
    s0 += q[e] * k0[e];
    s1 += q[e] * k1[e];
    s2 += q[e] * k2[e];
    s3 += q[e] * k3[e];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

// scores[t] <- exp((scores[t] - max) * scale) for t < cnt (scale > 0): the numerators of
// softmax(scores * scale); returns their sum.
inline float exp_shifted(float* scores, int cnt, float scale) {
  float top = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : top)
  for (int t = 0; t < cnt; ++t) top = std::max(top, scores[t]);
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int t = 0; t < cnt; ++t) {
    scores[t] = exp_nonpositive((scores[t] - top) * scale);
    total += scores[t];
  }
  return total;
}

inline void prefetch_row(const float* row, int d) {
  for (int e = 0; e < d; e += 16) __builtin_prefetch(row + e);
}

// softmax(q . K[idx] * scale) @ V[idx] for one query over cnt keys: out [d]. Key indices come as int64
// (the selected keys) or int32 (all keys, for the CLS query), whichever is not null.
template <typename Index>
void attend(const float* q, const float* K, const float* V, const Index* idx, int cnt, int d, float scale,
            float* scores, float* out) {
  int t = 0;
  for (; t + 4 <= cnt; t += 4) {
    // the rows are scattered: ask for the keys two steps ahead, and for this step's values (read below)
    for (int ahead = t + 8; ahead < std::min(t + 12, cnt); ++ahead) prefetch_row(K + idx[ahead] * d, d);
    for (int now = t; now < t + 4; ++now) prefetch_row(V + idx[now] * d, d);
    dot4(q, K + idx[t] * d, K + idx[t + 1] * d, K + idx[t + 2] * d, K + idx[t + 3] * d, d, scores + t);
  }
  for (; t < cnt; ++t) scores[t] = dot(q, K + idx[t] * d, d);
  const float inverse = 1.0f / exp_shifted(scores, cnt, scale);
  int e = 0;
  for (; e + 64 <= d; e += 64) {  // 64 outputs in registers, even and odd keys apart: 8 independent FMA chains
    v16 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
    for (t = 0; t + 2 <= cnt; t += 2) {
      const float *r = V + idx[t] * d + e, *u = V + idx[t + 1] * d + e;
      const float p = scores[t], x = scores[t + 1];
      a0 += p * load16(r);
      a1 += p * load16(r + 16);
      a2 += p * load16(r + 32);
      a3 += p * load16(r + 48);
      b0 += x * load16(u);
      b1 += x * load16(u + 16);
      b2 += x * load16(u + 32);
      b3 += x * load16(u + 48);
    }
    if (t < cnt) {
      const float* r = V + idx[t] * d + e;
      a0 += scores[t] * load16(r);
      a1 += scores[t] * load16(r + 16);
      a2 += scores[t] * load16(r + 32);
      a3 += scores[t] * load16(r + 48);
    }
    const v16 slices[4] = {(a0 + b0) * inverse, (a1 + b1) * inverse, (a2 + b2) * inverse, (a3 + b3) * inverse};
    std::memcpy(out + e, slices, sizeof slices);
  }
  for (; e + 16 <= d; e += 16) {  // this 16-wide slice of out stays in a register over all keys
    v16 even = {}, odd = {};
    for (t = 0; t + 2 <= cnt; t += 2) {
      even += scores[t] * load16(V + idx[t] * d + e);
      odd += scores[t + 1] * load16(V + idx[t + 1] * d + e);
    }
    if (t < cnt) even += scores[t] * load16(V + idx[t] * d + e);
    const v16 slice = (even + odd) * inverse;
    std::memcpy(out + e, &slice, sizeof slice);
  }
  for (; e < d; ++e) {
    float acc = 0.0f;
    for (t = 0; t < cnt; ++t) acc += scores[t] * V[idx[t] * d + e];
    out[e] = acc * inverse;
  }
}

}  // namespace

// q, k, v [G, n, d]; a_down and coeff [G, n_q, n_down] (A_down and A~_down from the predictor; n_q = n -
// first_query); w_up [Gb, n_down, n]: the raw W_up columns, Gb == G (one per example and head, after token
// pruning) or Gb == num_heads (shared by the batch: row g uses g % num_heads), pruned here (up_prune, basis_abs).
// Returns out [G, n, d] and index [G, n_q, kk] (int64; each row's kk keys, unsorted). With with_attention false
// only the selection runs and out is empty (to time the two apart).
std::vector<at::Tensor> fused_forward(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor a_down, at::Tensor coeff,
                                      at::Tensor w_up, int64_t num_heads, int64_t kk, int64_t first_query,
                                      double up_prune, bool basis_abs, bool with_attention) {
  for (const auto& t : {q, k, v, a_down, coeff, w_up}) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() == 3,
                "fused_forward: every tensor must be a contiguous float32 CPU tensor with 3 dimensions");
  }
  const int64_t G = q.size(0), n = q.size(1), d = q.size(2), n_down = w_up.size(1), n_q = n - first_query;
  const int64_t Gb = w_up.size(0);
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "fused_forward: q, k, v shapes differ");
  TORCH_CHECK(first_query >= 0 && n_q >= 1, "fused_forward: first_query must lie in [0, n - 1]");
  TORCH_CHECK(w_up.size(2) == n && (Gb == G || Gb == num_heads),
              "fused_forward: w_up must be [G or num_heads, n_down, n]");
  TORCH_CHECK(a_down.size(0) == G && a_down.size(1) == n_q && a_down.size(2) == n_down &&
                  coeff.sizes() == a_down.sizes(),
              "fused_forward: a_down and coeff must be [G, n - first_query, n_down]");
  TORCH_CHECK(kk >= 1 && kk <= n, "fused_forward: kk must lie in [1, n]");
  auto out = with_attention ? at::empty({G, n, d}, q.options()) : at::empty({0}, q.options());
  auto index = at::empty({G, n_q, kk}, q.options().dtype(at::kLong));
  // Kept between calls (per calling thread): fresh buffers of this size come from mmap, and their page faults
  // cost as much as building the bases.
  thread_local std::vector<Basis> bases;
  if (bases.size() < static_cast<size_t>(Gb)) bases.resize(Gb);
  const float* up = w_up.data_ptr<float>();
  at::parallel_for(0, Gb, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      bases[g].build(up + g * n_down * n, n_down, n, static_cast<float>(up_prune), basis_abs);
  });
  const float *qd = q.data_ptr<float>(), *kd = k.data_ptr<float>(), *vd = v.data_ptr<float>();
  const float *ad = a_down.data_ptr<float>(), *cd = coeff.data_ptr<float>();
  float* od = out.data_ptr<float>();
  int64_t* id = index.data_ptr<int64_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  at::parallel_for(0, G, 1, [&](int64_t begin, int64_t end) {
    Scratch s(n);
    for (int64_t g = begin; g < end; ++g) {
      // Phase by phase over all queries of (example, head): the selection's working set (the basis, the scores) and
      // then the attention's (K and V) stay in cache through their loops instead of evicting each other.
      const Basis& b = bases[Gb == G ? g : g % num_heads];
      const float *K = kd + g * n * d, *V = vd + g * n * d;
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t row = g * n_q + i;
        select_row(cd + row * n_down, ad + row * n_down, b, kk, s, id + row * kk);
      }
      if (!with_attention) continue;
      for (int64_t i = 0; i < first_query; ++i)  // the CLS query with cls_dense: every key
        attend(qd + (g * n + i) * d, K, V, s.all_keys.data(), n, d, scale, s.scores.data(), od + (g * n + i) * d);
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t query = first_query + i;
        attend(qd + (g * n + query) * d, K, V, id + (g * n_q + i) * kk, kk, d, scale, s.scores.data(),
               od + (g * n + query) * d);
      }
    }
  });
  return {out, index};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_forward", torch::wrap_pybind_function(fused_forward), "fused_forward");
}
