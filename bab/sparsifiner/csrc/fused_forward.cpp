// The fused Sparsifiner inference kernel: fused_forward, called by bab.sparsifiner.fused, which compiles this file
// on first use (torch.utils.cpp_extension.load). The algorithm and its exactness argument are in that module's
// docstring; the comments here say why each loop is written the way it is (mostly: so that g++ -O3 vectorizes it).

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cfloat>
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

inline float unordered(uint32_t u) {
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
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

// The k-th largest of u[0..c) (1 <= k <= c; u has c + kPad room and is overwritten), exactly: the largest T with
// count(u >= T) >= k, fixed bit by bit from the top by counting passes that vectorize. After every 8 bits
// only the values sharing T's prefix are kept (the larger ones counted), so later passes read few vectors.
uint32_t kth_largest(uint32_t* u, int c, int k) {
  uint32_t t = 0;
  std::fill(u + c, u + c + kPad, 0u);
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t candidate = t | (1u << bit);
    if (count_at_least_u(u, c, candidate) >= k) t = candidate;
    if (bit % 8 == 0 && bit > 0) {  // keep t <= u <= t | (2^bit - 1); count and drop those above
      const uint32_t top = t | ((1u << bit) - 1);
      int kept = 0, above = 0;
#ifdef __AVX512F__
      const __m512i low = _mm512_set1_epi32(static_cast<int>(t)), high = _mm512_set1_epi32(static_cast<int>(top));
      for (int i = 0; i < c; i += 16) {  // in place: kept <= i, so a store never overtakes the loads
        const __m512i x = _mm512_loadu_si512(u + i);
        // lanes past c hold padding zeros, which t = 0 would keep
        const __mmask16 valid = c - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (c - i)) - 1);
        const __mmask16 over = _mm512_cmpgt_epu32_mask(x, high) & valid;
        const __mmask16 keep = _mm512_cmpge_epu32_mask(x, low) & valid & static_cast<__mmask16>(~over);
        _mm512_storeu_si512(u + kept, _mm512_maskz_compress_epi32(keep, x));
        kept += __builtin_popcount(keep);
        above += __builtin_popcount(over);
      }
#else
      for (int i = 0; i < c; ++i) {
        const uint32_t x = u[i];
        u[kept] = x;
        kept += (x >= t && x <= top) ? 1 : 0;
        above += x > top ? 1 : 0;
      }
#endif
      c = kept;
      k -= above;
      std::fill(u + c, u + c + kPad, 0u);
    }
  }
  return t;
}

// Writes exactly k ids to out: every ids[i] with u[i] > t, then those with u[i] == t (in order) until k.
// With t the k-th largest there are fewer than k of the first kind and at least k of both together.
// Branch-free into `staging` (c + kPad room): at keep rates near 1/2 the comparisons are coin flips.
void collect(const uint32_t* u, const int32_t* ids, int c, uint32_t t, int k, int32_t* staging, int64_t* out) {
  int filled = 0, i = 0;
#ifdef __AVX512F__
  const __m512i bound = _mm512_set1_epi32(static_cast<int>(t));
  for (; i + 16 <= c; i += 16) {
    const __mmask16 above = _mm512_cmpgt_epu32_mask(_mm512_loadu_si512(u + i), bound);
    _mm512_storeu_si512(staging + filled, _mm512_maskz_compress_epi32(above, _mm512_loadu_si512(ids + i)));
    filled += __builtin_popcount(above);
  }
#endif
  for (; i < c; ++i) {
    staging[filled] = ids[i];
    filled += u[i] > t ? 1 : 0;
  }
  for (i = 0; i < c && filled < k; ++i) {  // the ties at t: usually one key, found early
    staging[filled] = ids[i];
    filled += u[i] == t ? 1 : 0;
  }
  for (i = 0; i < k; ++i) out[i] = staging[i];
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
// Kept dense (for the rare full-row fallback), as CSR rows (for the sparse accumulation), transposed (for
// the exact key of single keys), and per row the range of its entries, zeros included, that bounds what the
// coefficients left out can add to any key.
struct Basis {
  int n_down = 0, n = 0;
  std::vector<int32_t> start, col;
  std::vector<float> dense, val, transposed, low, high, absmax;
  std::vector<int32_t> positions;  // 0, 1, ..., n + kPad - 1

  void build(const float* w_up, int rows, int cols, float up_prune, bool basis_abs) {
    n_down = rows;
    n = cols;
    const size_t size = static_cast<size_t>(rows) * cols;
    dense.resize(size);
    transposed.resize(size);
    col.resize(size + kPad);  // the CSR arrays are filled in place, at most every entry
    val.resize(size + kPad);
    start.assign(rows + 1, 0);
    low.assign(rows, 0.0f);
    high.assign(rows, 0.0f);
    absmax.assign(rows, 0.0f);
#pragma omp simd
    for (size_t e = 0; e < size; ++e) {
      const float x = basis_abs ? std::fabs(w_up[e]) : w_up[e];
      dense[e] = std::fabs(x) >= up_prune ? x : 0.0f;
    }
    positions.resize(cols + kPad);
    for (int j = 0; j < cols + kPad; ++j) positions[j] = j;
    int nnz = 0;
    for (int m = 0; m < rows; ++m) {
      const float* row = dense.data() + static_cast<size_t>(m) * cols;
      float lo = 0.0f, hi = 0.0f, big = 0.0f;
#pragma omp simd reduction(min : lo) reduction(max : hi, big)
      for (int j = 0; j < cols; ++j) {
        lo = std::min(lo, row[j]);
        hi = std::max(hi, row[j]);
        big = std::max(big, std::fabs(row[j]));
      }
      low[m] = lo;
      high[m] = hi;
      absmax[m] = big;
      nnz += compact_nonzero(row, cols, positions.data(), val.data() + nnz, col.data() + nnz);
      start[m + 1] = nnz;
    }
    for (int j0 = 0; j0 < cols; j0 += 16) {  // 16 columns at a time: contiguous reads, writes within 2 kB
      const int width = std::min(16, cols - j0);
      for (int m = 0; m < rows; ++m) {
        const float* source = dense.data() + static_cast<size_t>(m) * cols + j0;
        for (int t = 0; t < width; ++t) transposed[static_cast<size_t>(j0 + t) * rows + m] = source[t];
      }
    }
  }
};

// Per-thread buffers, sized once per call.
struct Scratch {
  std::vector<float> partial, key, weight, scores, values, narrow;
  std::vector<int32_t> ids, in, unsure, rank, nonzero, all_keys;
  std::vector<uint32_t> order, work;

  Scratch(int n, int n_down)
      : partial(n + kPad), key(n + kPad), weight(n_down), scores(n + kPad), values(n + kPad), narrow(n + kPad),
        ids(n + kPad), in(n + kPad), unsure(n + kPad), rank(n + kPad),
        nonzero(n_down), all_keys(n + kPad), order(n + kPad), work(n + kPad) {
    for (int j = 0; j < n + kPad; ++j) all_keys[j] = j;
  }
};

inline float dot(const float* a, const float* b, int len) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int e = 0; e < len; ++e) acc += a[e] * b[e];
  return acc;
}

// Keeps the entries of x[0..n) above `floor`: their values in values[], their positions in ids[] (both need
// n + kPad room); returns how many, and their maximum in `top` (`floor` if none). AVX-512 compresses 16 at a
// time (into a register, then a plain store: compress-to-memory is slow on AMD); elsewhere branch-free scalar.
int compact_above(const float* x, int n, float floor, const int32_t* positions, float* values, int32_t* ids,
                  float& top) {
  int c = 0, j = 0;
  top = floor;
#ifdef __AVX512F__
  const __m512 bound = _mm512_set1_ps(floor);
  __m512 largest = bound;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    const __mmask16 keep = _mm512_cmp_ps_mask(v, bound, _CMP_GT_OQ);
    _mm512_storeu_ps(values + c, _mm512_maskz_compress_ps(keep, v));
    _mm512_storeu_si512(ids + c, _mm512_maskz_compress_epi32(keep, _mm512_loadu_si512(positions + j)));
    c += __builtin_popcount(keep);
    largest = _mm512_max_ps(largest, v);
  }
  top = _mm512_reduce_max_ps(largest);
#endif
  for (; j < n; ++j) {
    values[c] = x[j];
    ids[c] = positions[j];
    c += x[j] > floor ? 1 : 0;
    top = x[j] > top ? x[j] : top;
  }
  return c;
}

// How many of x[0..c) are >= t. x must be padded to a multiple of 16 with values below any t (see pad_values).
inline int count_at_least(const float* x, int c, float t) {
  int count = 0;
#ifdef __AVX512F__
  const __m512 bound = _mm512_set1_ps(t);
  for (int i = 0; i < c; i += 16)
    count += __builtin_popcount(_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), bound, _CMP_GE_OQ));
#else
#pragma omp simd reduction(+ : count)
  for (int i = 0; i < c; ++i) count += x[i] >= t ? 1 : 0;
#endif
  return count;
}

// Fills x[c..c+16) with -FLT_MAX, so whole-vector loops over x may run past c (to a multiple of 16).
inline void pad_values(float* x, int c) { std::fill(x + c, x + c + kPad, -FLT_MAX); }

// Keeps the values of x[0..c) (padded) inside [lo, hi] in out[] (padded on return); returns how many, and in
// `above` how many were > hi.
int compact_between(const float* x, int c, float lo, float hi, float* out, int& above) {
  int kept = 0;
  above = 0;
#ifdef __AVX512F__
  const __m512 low = _mm512_set1_ps(lo), high = _mm512_set1_ps(hi);
  for (int i = 0; i < c; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 over = _mm512_cmp_ps_mask(v, high, _CMP_GT_OQ);
    const __mmask16 keep = _mm512_cmp_ps_mask(v, low, _CMP_GE_OQ) & static_cast<__mmask16>(~over);
    _mm512_storeu_ps(out + kept, _mm512_maskz_compress_ps(keep, v));
    kept += __builtin_popcount(keep);
    above += __builtin_popcount(over);
  }
#else
  for (int i = 0; i < c; ++i) {
    out[kept] = x[i];
    kept += (x[i] >= lo && x[i] <= hi) ? 1 : 0;
    above += x[i] > hi ? 1 : 0;
  }
#endif
  pad_values(out, kept);
  return kept;
}

// Brackets the k-th largest of values[0..c) (padded, all > 0, k <= c, top their maximum): on return
// count(values >= lo) >= k > count(values > hi) and hi - lo <= width (or lo, hi adjacent floats). Bisection on
// the value; after three halvings only the values inside [lo, hi] are kept (in `narrow`) and those above hi
// counted, so the later passes read a vector or two instead of all candidates.
void bracket_kth(const float* values, int c, int k, float width, float top, float* narrow, float& lo, float& hi) {
  lo = 0.0f;
  hi = top;
  const float* current = values;
  int size = c, rank = k;  // the k-th largest overall is the rank-th largest of current
  for (int pass = 1; hi - lo > width; ++pass) {
    const float mid = 0.5f * (lo + hi);
    if (mid <= lo || mid >= hi) break;  // adjacent floats
    (count_at_least(current, size, mid) >= rank ? lo : hi) = mid;
    if (pass == 3) {
      int above = 0;
      size = compact_between(current, size, lo, hi, narrow, above);
      rank -= above;
      current = narrow;
    }
  }
}

// Splits the candidates (values, ids)[0..c) into ids with value > sure (to `in`) and ids with maybe <= value
// <= sure (to `unsure`); returns the two counts. values padded as for count_at_least.
inline std::pair<int, int> split_candidates(const float* values, const int32_t* ids, int c, float sure, float maybe,
                                            int32_t* in, int32_t* unsure) {
  int filled = 0, undecided = 0;
#ifdef __AVX512F__
  const __m512 high = _mm512_set1_ps(sure), low = _mm512_set1_ps(maybe);
  for (int i = 0; i < c; i += 16) {
    const __m512 v = _mm512_loadu_ps(values + i);
    const __m512i id = _mm512_loadu_si512(ids + i);
    const __mmask16 above = _mm512_cmp_ps_mask(v, high, _CMP_GT_OQ);
    const __mmask16 near = _mm512_cmp_ps_mask(v, low, _CMP_GE_OQ) & static_cast<__mmask16>(~above);
    _mm512_storeu_si512(in + filled, _mm512_maskz_compress_epi32(above, id));
    _mm512_storeu_si512(unsure + undecided, _mm512_maskz_compress_epi32(near, id));
    filled += __builtin_popcount(above);
    undecided += __builtin_popcount(near);
  }
#else
  for (int i = 0; i < c; ++i) {
    in[filled] = ids[i];
    filled += values[i] > sure ? 1 : 0;
    unsure[undecided] = ids[i];
    undecided += (values[i] >= maybe && values[i] <= sure) ? 1 : 0;
  }
#endif
  return {filled, undecided};
}

// Fallback for a row where keys with P_j <= 0 could make the top k: the exact ranking key of every key
// (w @ W~_up, dense rows so the inner loop is an axpy), then the k largest.
void select_all(const float* w, const Basis& b, int k, Scratch& s, int64_t* out) {
  const int n = b.n;
  float* key = s.key.data();
  std::fill(key, key + n, 0.0f);
  for (int m = 0; m < b.n_down; ++m) {
    const float wm = w[m];
    const float* row = b.dense.data() + static_cast<size_t>(m) * n;
#pragma omp simd
    for (int j = 0; j < n; ++j) key[j] += wm * row[j];
  }
  uint32_t *u = s.order.data(), *work = s.work.data();
  for (int j = 0; j < n; ++j) u[j] = work[j] = ordered(key[j]);
  collect(u, s.all_keys.data(), n, kth_largest(work, n, k), k, s.in.data(), out);
}

// The top k of one query's ranking key (coeff + tie_break * a) @ W~_up, exactly; see the Python docstring.
void select_row(const float* coeff, const float* a, const Basis& b, int k, float tie_break, Scratch& s,
                int64_t* out) {
  const int n_down = b.n_down, n = b.n;
  float* w = s.weight.data();
  float low = 0.0f, high = 0.0f, magnitude = 0.0f;
#pragma omp simd reduction(+ : low, high, magnitude)
  for (int m = 0; m < n_down; ++m) {
    const float wm = coeff[m] + tie_break * a[m];
    w[m] = wm;
    const bool kept = coeff[m] != 0.0f;
    // a zero coefficient's basis row adds w[m] * W~_up[m, j] to key j: between these bounds, whatever j
    low += kept ? 0.0f : (wm >= 0.0f ? wm * b.low[m] : wm * b.high[m]);
    high += kept ? 0.0f : (wm >= 0.0f ? wm * b.high[m] : wm * b.low[m]);
    magnitude += kept ? std::fabs(wm) * b.absmax[m] : 0.0f;  // bounds the rounding error of P_j
  }
  int nnz = 0;
  for (int m = 0; m < n_down; ++m) {  // branch-free: which coefficients are nonzero is unpredictable
    s.nonzero[nnz] = m;
    nnz += coeff[m] != 0.0f ? 1 : 0;
  }
  // P_j: the nonzero coefficients' part of the key, from the nonzero entries of their basis rows only.
  float* partial = s.partial.data();
  std::fill(partial, partial + n, 0.0f);
  for (int t = 0; t < nnz; ++t) {
    const int m = s.nonzero[t];
    const float wm = w[m];
    for (int e = b.start[m]; e < b.start[m + 1]; ++e) partial[b.col[e]] += wm * b.val[e];
  }
  // The candidates: keys with P_j > 0. With fewer than k the k-th largest P is <= 0: fall back.
  float* values = s.values.data();
  int32_t* ids = s.ids.data();
  float top;
  const int c = compact_above(partial, n, 0.0f, s.all_keys.data(), values, ids, top);
  if (c < k) return select_all(w, b, k, s, out);
  pad_values(values, c);
  // key_j lies in [P_j + low, P_j + high]; the margin covers float rounding of P_j, low and high.
  const float width = (high - low) * (1.0f + 1e-5f) + 2e-5f * magnitude + FLT_MIN;
  // Bracket the k-th largest P: count(P >= lo) >= k > count(P > hi), bisected until hi - lo <= width.
  float lo, hi;
  bracket_kth(values, c, k, width, top, s.narrow.data(), lo, hi);
  if (!(lo - width > 0.0f)) return select_all(w, b, k, s, out);  // a key with P <= 0 could make the top k
  // In: P_j > hi + width beats every key with P <= hi (more than n - k of them). Out: P_j < lo - width is beaten
  // by the k or more keys with P >= lo. In between: undecided, ranked by the exact key.
  int32_t *in = s.in.data(), *undecided = s.unsure.data();
  const auto [filled, unsure] = split_candidates(values, ids, c, hi + width, lo - width, in, undecided);
  for (int t = 0; t < filled; ++t) out[t] = in[t];
  const int need = k - filled;
  if (unsure == need) {
    for (int t = 0; t < unsure; ++t) out[filled + t] = undecided[t];
    return;
  }
  float* key = s.key.data();
  for (int t = 0; t < unsure; ++t)  // the exact key, over all n_down coefficients
    key[t] = dot(w, b.transposed.data() + static_cast<size_t>(undecided[t]) * n_down, n_down);
  if (unsure <= 64) {  // usually a handful: sort them by exact key (ties in index order)
    int32_t* rank = s.rank.data();
    for (int t = 0; t < unsure; ++t) rank[t] = t;
    std::partial_sort(rank, rank + need, rank + unsure, [&](int32_t x, int32_t y) {
      return key[x] > key[y] || (key[x] == key[y] && undecided[x] < undecided[y]);
    });
    for (int t = 0; t < need; ++t) out[filled + t] = undecided[rank[t]];
    return;
  }
  uint32_t *u = s.order.data(), *work = s.work.data();
  for (int t = 0; t < unsure; ++t) u[t] = work[t] = ordered(key[t]);
  collect(u, undecided, unsure, kth_largest(work, unsure, need), need, s.in.data(), out + filled);
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
                                      double tie_break, double up_prune, bool basis_abs, bool with_attention) {
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
  const float scale = 1.0f / std::sqrt(static_cast<float>(d)), tb = static_cast<float>(tie_break);
  at::parallel_for(0, G, 1, [&](int64_t begin, int64_t end) {
    Scratch s(n, n_down);
    for (int64_t g = begin; g < end; ++g) {
      // Phase by phase over all queries of (example, head): the selection's working set (the basis, P) and
      // then the attention's (K and V) stay in cache through their loops instead of evicting each other.
      const Basis& b = bases[Gb == G ? g : g % num_heads];
      const float *K = kd + g * n * d, *V = vd + g * n * d;
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t row = g * n_q + i;
        select_row(cd + row * n_down, ad + row * n_down, b, kk, tb, s, id + row * kk);
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
