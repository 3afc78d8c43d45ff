/* kvq's non-BLAS hot loops in C (docs/codecs.md, "How it runs"). Every kernel computes
 * exactly what the numpy path in kvq_math.py / kvq_decode.py / kvq.py computes, bit for bit:
 * the same float32 operations in the same order (built with -ffp-contract=off: no fused
 * multiply-adds), the same integer conversions. The rotations stay numpy matmuls (BLAS).
 *
 * Buffers come in through the buffer protocol (any C-contiguous bytes-like object, numpy
 * arrays included); every size is checked against the buffers' lengths before the GIL is
 * released, so a malformed call is a ValueError, never an out-of-bounds access.
 *
 * x86-64 with AVX2 (checked at run time, __builtin_cpu_supports) takes the SIMD loops, built
 * per function with __attribute__((target)); anything else the portable scalar loops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KVQ_X86 1
#include <immintrin.h>
#else
#define KVQ_X86 0
#endif

static int use_simd = 0;   /* AVX2 loops in use (toggled by simd() for the tests) */
static int have_simd = 0;  /* the CPU has AVX2 and F16C */

/* ---- shared helpers -------------------------------------------------------------------- */

/* the little-endian group of 8 codes at p (``bits`` bytes); reads 8 bytes when they are all
 * inside the buffer (the codes only use the first ``bits``) */
static inline uint64_t load_group(const uint8_t *p, const uint8_t *end, int bits)
{
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&w, p, end - p >= 8 ? 8 : (size_t)bits);
#else
    for (int k = 0; k < bits; k++)
        w |= (uint64_t)p[k] << (8 * k);
    (void)end;
#endif
    return w;
}

static inline void store_group(uint8_t *p, uint64_t w, int bits)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &w, (size_t)bits);
#else
    for (int k = 0; k < bits; k++)
        p[k] = (uint8_t)(w >> (8 * k));
#endif
}

static inline float f32_of(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t bits_of(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

/* ---- decode: packed codes -> levels x gain -------------------------------------------- */

typedef struct {
    const uint8_t *src, *end;  /* codes of row 0, end of the payload */
    Py_ssize_t rows, n;        /* rows x n codes (n a multiple of 8) */
    int bits;
    const float *levels;       /* 2**bits levels */
    const uint8_t *gcodes;     /* gain code of row r at gcodes[r * gstride] */
    Py_ssize_t gstride;
    const float *table;        /* 256 gains */
    float *out;                /* rows x n */
} dq_args;

static void dq_scalar(const dq_args *a)
{
    const int bits = a->bits;
    const uint64_t mask = (1u << bits) - 1;
    const Py_ssize_t row_bytes = a->n / 8 * bits;
    for (Py_ssize_t r = 0; r < a->rows; r++) {
        const float g = a->table[a->gcodes[r * a->gstride]];
        const uint8_t *p = a->src + r * row_bytes;
        float *o = a->out + r * a->n;
        for (Py_ssize_t c = 0; c < a->n; c += 8, p += bits) {
            const uint64_t w = load_group(p, a->end, bits);
            for (int k = 0; k < 8; k++)
                o[c + k] = a->levels[(w >> (k * bits)) & mask] * g;
        }
    }
}

#if KVQ_X86
/* 8 codes per step: lanes 0-3 shift codes 0-3 out of the group's low 32 bits, lanes 4-7
 * codes 4-7 out of the bits from 4 * bits up; the levels are looked up with in-register
 * permutes (8 levels per register), a blend per further 8 levels */
__attribute__((target("avx2")))
static void dq_avx2(const dq_args *a)
{
    const int bits = a->bits;
    if (bits > 5) {  /* never written by the encoder; valid, so decoded the plain way */
        dq_scalar(a);
        return;
    }
    float lv[32] = {0};
    memcpy(lv, a->levels, sizeof(float) << bits);
    const int ntab = bits <= 3 ? 1 : 1 << (bits - 3);
    __m256 tab[4];
    for (int t = 0; t < ntab; t++)
        tab[t] = _mm256_loadu_ps(lv + 8 * t);
    const __m256i shifts = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits,
                                             0, bits, 2 * bits, 3 * bits);
    const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
    const Py_ssize_t row_bytes = a->n / 8 * bits;
    for (Py_ssize_t r = 0; r < a->rows; r++) {
        const __m256 g = _mm256_set1_ps(a->table[a->gcodes[r * a->gstride]]);
        const uint8_t *p = a->src + r * row_bytes;
        float *o = a->out + r * a->n;
        for (Py_ssize_t c = 0; c < a->n; c += 8, p += bits) {
            const uint64_t w = load_group(p, a->end, bits);
            const __m256i v = _mm256_set_m128i(_mm_set1_epi32((int)(uint32_t)(w >> (4 * bits))),
                                               _mm_set1_epi32((int)(uint32_t)w));
            const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
            __m256 x = _mm256_permutevar8x32_ps(tab[0], code);
            if (ntab > 1) {
                const __m256i hi = _mm256_srli_epi32(code, 3);
                for (int t = 1; t < ntab; t++) {
                    const __m256 sel = _mm256_castsi256_ps(
                        _mm256_cmpeq_epi32(hi, _mm256_set1_epi32(t)));
                    x = _mm256_blendv_ps(x, _mm256_permutevar8x32_ps(tab[t], code), sel);
                }
            }
            _mm256_storeu_ps(o + c, _mm256_mul_ps(x, g));
        }
    }
}
#endif

/* ---- decode: float32 -> fp16/bf16 words, channel order undone --------------------------- */

/* from_f32(prescaled=True, truncate=True) word for word. fp16: y is prescaled by 2**-112, so
 * its bits >> 13 (kept to 16 bits) are the fp16 magnitude truncated, or'ed with the sign;
 * bf16: the top half, truncated. (F16C's vcvtps2ph would need y * 2**112 first, which a
 * thread running with denormals-are-zero would flush: the integer form is exact always.) */
static void narrow_scalar(const float *y, uint16_t *w, Py_ssize_t count, int f16)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint32_t b = bits_of(y[i]);
        w[i] = f16 ? (uint16_t)((uint16_t)(b >> 13) | ((b >> 16) & 0x8000u))
                   : (uint16_t)(b >> 16);
    }
}

#if KVQ_X86
__attribute__((target("avx2")))
static void narrow_avx2(const float *y, uint16_t *w, Py_ssize_t count, int f16)
{
    Py_ssize_t i = 0;
    const __m256i low = _mm256_set1_epi32(0xFFFF);
    const __m256i sgn = _mm256_set1_epi32(0x8000);
    for (; i + 16 <= count; i += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(y + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(y + i + 8));
        if (f16) {
            a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a, 13), low),
                                _mm256_and_si256(_mm256_srli_epi32(a, 16), sgn));
            b = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(b, 13), low),
                                _mm256_and_si256(_mm256_srli_epi32(b, 16), sgn));
        } else {
            a = _mm256_srli_epi32(a, 16);
            b = _mm256_srli_epi32(b, 16);
        }
        /* packus works per 128-bit lane: fix the quadword order afterwards */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(w + i), p);
    }
    narrow_scalar(y + i, w + i, count - i, f16);
}
#endif

static void narrow(const float *y, uint16_t *w, Py_ssize_t count, int f16)
{
#if KVQ_X86
    if (use_simd) {
        narrow_avx2(y, w, count, f16);
        return;
    }
#endif
    narrow_scalar(y, w, count, f16);
}

typedef struct {
    const float *y;            /* rows x d, channels in stored order */
    uint16_t *out;             /* rows x d */
    Py_ssize_t rows, d;
    int f16;
    const int32_t *index;      /* NULL, or output group k = stored group index[k] */
    int g;                     /* channels per group: 1, 2 or 4 */
    uint16_t *tmp;             /* d words */
    struct shuf_entry_s *ent;  /* g = 1 with AVX2: room for d shuffles, else NULL */
    int32_t *count;            /* d / 8 */
} nw_args;

#if KVQ_X86
/* The un-permutation of 16-bit words (g = 1) as byte shuffles: output lane L (8 words) is
 * the or of pshufb(stored lane S, shuffle) over the stored lanes S it draws from. An
 * encoder's order keeps each segment's channels ascending, so a lane draws from a few
 * stored lanes: a handful of shuffles per 8 words instead of 8 scalar loads and stores.
 * Built per call; a lane has at most 8 entries, so ``ent`` needs room for d. */
typedef struct shuf_entry_s {
    int32_t src;       /* stored lane */
    uint8_t shuf[16];
} shuf_entry;

static Py_ssize_t build_shuffles(const int32_t *ix, Py_ssize_t d, shuf_entry *ent,
                                 int32_t *count)
{
    const Py_ssize_t lanes = d / 8;
    Py_ssize_t n = 0;
    for (Py_ssize_t L = 0; L < lanes; L++) {
        count[L] = 0;
        for (Py_ssize_t k = 0; k < 8; k++) {
            const int32_t S = ix[8 * L + k] / 8, at = ix[8 * L + k] % 8;
            Py_ssize_t e = n;
            for (Py_ssize_t f = n - count[L]; f < n; f++)
                if (ent[f].src == S)
                    e = f;
            if (e == n) {
                ent[n].src = S;
                memset(ent[n].shuf, 0x80, 16);
                n++;
                count[L]++;
            }
            ent[e].shuf[2 * k] = (uint8_t)(2 * at);
            ent[e].shuf[2 * k + 1] = (uint8_t)(2 * at + 1);
        }
    }
    return n;
}

__attribute__((target("avx2")))
static void unpermute_avx2(const uint16_t *tmp, uint16_t *w, const shuf_entry *ent,
                           const int32_t *count, Py_ssize_t d)
{
    for (Py_ssize_t L = 0; L < d / 8; L++) {
        __m128i acc = _mm_setzero_si128();
        for (int32_t e = 0; e < count[L]; e++, ent++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(tmp + 8 * ent->src));
            acc = _mm_or_si128(acc, _mm_shuffle_epi8(
                v, _mm_loadu_si128((const __m128i *)ent->shuf)));
        }
        _mm_storeu_si128((__m128i *)(w + 8 * L), acc);
    }
}
#endif

static void narrow_rows(const nw_args *a)
{
    if (a->index == NULL) {
        narrow(a->y, a->out, a->rows * a->d, a->f16);
        return;
    }
#if KVQ_X86
    if (use_simd && a->g == 1 && a->ent != NULL) {
        build_shuffles(a->index, a->d, a->ent, a->count);
        for (Py_ssize_t r = 0; r < a->rows; r++) {
            narrow(a->y + r * a->d, a->tmp, a->d, a->f16);
            unpermute_avx2(a->tmp, a->out + r * a->d, a->ent, a->count, a->d);
        }
        return;
    }
#endif
    const Py_ssize_t groups = a->d / a->g;
    for (Py_ssize_t r = 0; r < a->rows; r++) {
        narrow(a->y + r * a->d, a->tmp, a->d, a->f16);
        uint16_t *o = a->out + r * a->d;
        const int32_t *ix = a->index;
        if (a->g == 4) {
            const uint64_t *t = (const uint64_t *)a->tmp;
            for (Py_ssize_t k = 0; k < groups; k++)
                memcpy(o + 4 * k, t + ix[k], 8);
        } else if (a->g == 2) {
            const uint32_t *t = (const uint32_t *)a->tmp;
            for (Py_ssize_t k = 0; k < groups; k++)
                memcpy(o + 2 * k, t + ix[k], 4);
        } else {
            for (Py_ssize_t k = 0; k < groups; k++)
                o[k] = a->tmp[ix[k]];
        }
    }
}

/* ---- encode: fp16/bf16 words -> float32 ------------------------------------------------- */

/* to_f32 for every finite word, exactly (fp16: the word's bits << 13, sign kept, times
 * 2**112; bf16: << 16). F16C converts fp16 exactly too; it differs from the integer form
 * only on Inf/NaN words, which the encoder rejects either way (its range check sees them as
 * Inf/NaN or as values >= 2**16). */
static void widen_scalar(const uint16_t *w, float *x, Py_ssize_t count, int f16)
{
    const float unscale = 0x1p112f;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (f16) {
            const uint32_t a = ((uint32_t)(int32_t)(int16_t)w[i] << 13) & 0x8FFFFFFFu;
            x[i] = f32_of(a) * unscale;
        } else {
            x[i] = f32_of((uint32_t)w[i] << 16);
        }
    }
}

#if KVQ_X86
__attribute__((target("avx2,f16c")))
static void widen_avx2(const uint16_t *w, float *x, Py_ssize_t count, int f16)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= count; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(w + i));
        const __m256 f = f16 ? _mm256_cvtph_ps(h)
                             : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h),
                                                                     16));
        _mm256_storeu_ps(x + i, f);
    }
    widen_scalar(w + i, x + i, count - i, f16);
}
#endif

/* ---- encode: quantize and pack ---------------------------------------------------------- */

typedef struct {
    const float *z;            /* rows x n rotated values */
    const float *inv;          /* per row: GRID * sqrt(n) / norm */
    float offset;
    const uint8_t *table;      /* code of cell floor(z * inv + offset) */
    Py_ssize_t tlen, rows, n;
    int bits;
    uint8_t *out;              /* rows * n * bits / 8 bytes */
} qp_args;

/* quantize() then pack_into(): z * inv (float32), + offset (float32), truncated to an
 * index clipped into the table, the codes of 8 neighbours packed into ``bits`` bytes */
static void quantize_pack(const qp_args *a)
{
    const int bits = a->bits;
    const Py_ssize_t last = a->tlen - 1;
    uint8_t *p = a->out;
    for (Py_ssize_t r = 0; r < a->rows; r++) {
        const float s = a->inv[r];
        const float *z = a->z + r * a->n;
        for (Py_ssize_t c = 0; c < a->n; c += 8, p += bits) {
            uint64_t w = 0;
            for (int k = 0; k < 8; k++) {
                float t = z[c + k] * s;
                t = t + a->offset;
                /* numpy: a cast to uint16 (truncation), then take(mode="clip") */
                const Py_ssize_t i = !(t < (float)a->tlen) ? last
                                     : t > 0.0f ? (Py_ssize_t)t : 0;
                w |= (uint64_t)a->table[i] << (k * bits);
            }
            store_group(p, w, bits);
        }
    }
}

#if KVQ_X86
__attribute__((target("avx2")))
static void quantize_pack_avx2(const qp_args *a)
{
    /* The same arithmetic 8 lanes at a time. The table (from sorted thresholds) never
     * decreases, so code(i) = table[0] + the number of steps B with i >= B: that count is
     * 2 instructions per step for 8 lanes, faster than 8 scalar lookups up to 15 steps
     * (4 bits). A table with more steps, or one that decreases, is looked up. */
    const int bits = a->bits;
    int32_t steps[16];
    int nsteps = 0, lookup = 0;
    for (Py_ssize_t i = 1; i < a->tlen && !lookup; i++) {
        if (a->table[i] < a->table[i - 1])
            lookup = 1;
        for (int k = a->table[i - 1]; k < a->table[i] && !lookup; k++) {
            if (nsteps == 16)
                lookup = 1;
            else
                steps[nsteps++] = (int32_t)i - 1;  /* i >= B  <=>  i > B - 1 */
        }
    }
    __m256i bound[16];
    for (int k = 0; k < nsteps; k++)
        bound[k] = _mm256_set1_epi32(steps[k]);
    const __m256i base = _mm256_set1_epi32(a->table[0]);
    const __m256 off = _mm256_set1_ps(a->offset);
    const __m256i last = _mm256_set1_epi32((int)(a->tlen - 1));
    const __m256 lim = _mm256_set1_ps((float)a->tlen);
    const __m256i shifts = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits,
                                             0, bits, 2 * bits, 3 * bits);
    uint8_t *p = a->out;
    int32_t ix[8];
    for (Py_ssize_t r = 0; r < a->rows; r++) {
        const __m256 s = _mm256_set1_ps(a->inv[r]);
        const float *z = a->z + r * a->n;
        for (Py_ssize_t c = 0; c < a->n; c += 8, p += bits) {
            const __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(z + c), s), off);
            /* truncation of t > 0, else 0; t >= tlen (or NaN) -> the last cell */
            __m256i i = _mm256_cvttps_epi32(_mm256_max_ps(t, _mm256_setzero_ps()));
            const __m256 big = _mm256_cmp_ps(t, lim, _CMP_NLT_UQ);
            i = _mm256_blendv_epi8(i, last, _mm256_castps_si256(big));
            uint64_t w = 0;
            if (lookup) {
                _mm256_storeu_si256((__m256i *)ix, i);
                for (int k = 0; k < 8; k++)
                    w |= (uint64_t)a->table[ix[k]] << (k * bits);
            } else {
                __m256i code = base;
                for (int k = 0; k < nsteps; k++)
                    code = _mm256_sub_epi32(code, _mm256_cmpgt_epi32(i, bound[k]));
                /* codes 0-3 and 4-7 each or'ed into one 32-bit lane */
                __m256i x = _mm256_sllv_epi32(code, shifts);
                x = _mm256_or_si256(x, _mm256_shuffle_epi32(x, 0x4E));
                x = _mm256_or_si256(x, _mm256_shuffle_epi32(x, 0xB1));
                const uint32_t lo = (uint32_t)_mm256_cvtsi256_si32(x);
                const uint32_t hi = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(x, 1));
                w = lo | (uint64_t)hi << (4 * bits);
            }
            store_group(p, w, bits);
        }
    }
}
#endif

/* ---- Python bindings -------------------------------------------------------------------- */

static int fits(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t limit)
{
    /* a * b * c <= limit, all >= 0, without overflow */
    if (a < 0 || b < 0 || c < 0)
        return 0;
    if (a == 0 || b == 0 || c == 0)
        return 1;
    return a <= limit / b / c;
}

static PyObject *bad(const char *what)
{
    PyErr_SetString(PyExc_ValueError, what);
    return NULL;
}

static PyObject *py_dequantize(PyObject *self, PyObject *args)
{
    Py_buffer src, levels, gcodes, table, out;
    Py_ssize_t start, rows, n, gstart, gstride;
    int bits;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnniy*y*nny*w*", &src, &start, &rows, &n, &bits, &levels,
                          &gcodes, &gstart, &gstride, &table, &out))
        return NULL;
    PyObject *res = NULL;
    const Py_ssize_t row_bytes = n / 8 * bits;
    if (bits < 1 || bits > 8 || n <= 0 || n % 8 || rows < 0 || start < 0 || gstart < 0
        || gstride < 0 || start > src.len || gstart >= gcodes.len)
        res = bad("dequantize: bad shape");
    else if (!fits(rows, row_bytes, 1, src.len - start) || levels.len < (4 << bits)
             || table.len < 4 * 256 || !fits(rows, n, 4, out.len)
             || (rows > 0 && (!fits(rows - 1, gstride, 1, gcodes.len - 1 - gstart))))
        res = bad("dequantize: buffers too short");
    if (res == NULL && !PyErr_Occurred()) {
        const dq_args a = {(const uint8_t *)src.buf + start, (const uint8_t *)src.buf + src.len,
                           rows, n, bits, levels.buf, (const uint8_t *)gcodes.buf + gstart,
                           gstride, table.buf, out.buf};
        Py_BEGIN_ALLOW_THREADS
#if KVQ_X86
        if (use_simd)
            dq_avx2(&a);
        else
#endif
            dq_scalar(&a);
        Py_END_ALLOW_THREADS
        res = Py_None;
        Py_INCREF(res);
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&gcodes);
    PyBuffer_Release(&table);
    PyBuffer_Release(&out);
    return res;
}

static PyObject *py_narrow(PyObject *self, PyObject *args)
{
    Py_buffer y, out;
    Py_ssize_t rows, d;
    int f16, g;
    PyObject *index_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnpw*Oi", &y, &rows, &d, &f16, &out, &index_obj, &g))
        return NULL;
    PyObject *res = NULL;
    Py_buffer index = {0};
    int have_index = 0;
    int32_t *ix = NULL, *count = NULL;
    uint16_t *tmp = NULL;
    struct shuf_entry_s *ent = NULL;
    if (rows < 0 || d <= 0 || (g != 1 && g != 2 && g != 4) || d % g) {
        bad("narrow: bad shape");
        goto done;
    }
    if (!fits(rows, d, 4, y.len) || !fits(rows, d, 2, out.len)) {
        bad("narrow: buffers too short");
        goto done;
    }
    const Py_ssize_t groups = d / g;
    if (index_obj != Py_None) {
        if (PyObject_GetBuffer(index_obj, &index, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        have_index = 1;
        if (index.len != groups * (Py_ssize_t)sizeof(int64_t)) {
            bad("narrow: index is not d / g int64 entries");
            goto done;
        }
        ix = PyMem_Malloc(groups * sizeof(int32_t));
        tmp = PyMem_Malloc(d * sizeof(uint16_t));
        if (ix == NULL || tmp == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        const int64_t *src = index.buf;
        for (Py_ssize_t k = 0; k < groups; k++)  /* numpy's take(mode="clip") */
            ix[k] = (int32_t)(src[k] < 0 ? 0 : src[k] >= groups ? groups - 1 : src[k]);
#if KVQ_X86
        if (g == 1 && use_simd) {
            ent = PyMem_Malloc(d * sizeof(shuf_entry));
            count = PyMem_Malloc(d / 8 * sizeof(int32_t));
            if (ent == NULL || count == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
#endif
    }
    const nw_args a = {y.buf, out.buf, rows, d, f16, ix, g, tmp, ent, count};
    Py_BEGIN_ALLOW_THREADS
    narrow_rows(&a);
    Py_END_ALLOW_THREADS
    res = Py_None;
    Py_INCREF(res);
done:
    PyMem_Free(ix);
    PyMem_Free(tmp);
    PyMem_Free(ent);
    PyMem_Free(count);
    if (have_index)
        PyBuffer_Release(&index);
    PyBuffer_Release(&y);
    PyBuffer_Release(&out);
    return res;
}

static PyObject *py_widen(PyObject *self, PyObject *args)
{
    Py_buffer words, out;
    int f16;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*pw*", &words, &f16, &out))
        return NULL;
    PyObject *res = NULL;
    const Py_ssize_t count = words.len / 2;
    if (words.len % 2 || out.len < count * 4) {
        bad("widen: buffers do not match");
    } else {
        Py_BEGIN_ALLOW_THREADS
#if KVQ_X86
        if (use_simd)
            widen_avx2(words.buf, out.buf, count, f16);
        else
#endif
            widen_scalar(words.buf, out.buf, count, f16);
        Py_END_ALLOW_THREADS
        res = Py_None;
        Py_INCREF(res);
    }
    PyBuffer_Release(&words);
    PyBuffer_Release(&out);
    return res;
}

static PyObject *py_quantize_pack(PyObject *self, PyObject *args)
{
    Py_buffer z, inv, table, out;
    Py_ssize_t n;
    float offset;
    int bits;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*nfy*iw*", &z, &inv, &n, &offset, &table, &bits, &out))
        return NULL;
    PyObject *res = NULL;
    const Py_ssize_t rows = inv.len / 4;
    if (bits < 1 || bits > 8 || n <= 0 || n % 8 || inv.len % 4 || table.len < 1) {
        bad("quantize_pack: bad shape");
    } else if (!fits(rows, n, 4, z.len) || !fits(rows, n / 8, bits, out.len)) {
        bad("quantize_pack: buffers too short");
    } else {
        const qp_args a = {z.buf, inv.buf, offset, table.buf, table.len, rows, n, bits,
                           out.buf};
        Py_BEGIN_ALLOW_THREADS
#if KVQ_X86
        if (use_simd)
            quantize_pack_avx2(&a);
        else
#endif
            quantize_pack(&a);
        Py_END_ALLOW_THREADS
        res = Py_None;
        Py_INCREF(res);
    }
    PyBuffer_Release(&z);
    PyBuffer_Release(&inv);
    PyBuffer_Release(&table);
    PyBuffer_Release(&out);
    return res;
}

static PyObject *py_simd(PyObject *self, PyObject *args)
{
    int enable = -1;
    (void)self;
    if (!PyArg_ParseTuple(args, "|p", &enable))
        return NULL;
    if (enable >= 0)
        use_simd = enable && have_simd;
    return PyBool_FromLong(use_simd);
}

static PyMethodDef methods[] = {
    {"dequantize", py_dequantize, METH_VARARGS, "Packed codes to levels times gains."},
    {"narrow", py_narrow, METH_VARARGS, "float32 rows to fp16/bf16 words, order undone."},
    {"widen", py_widen, METH_VARARGS, "fp16/bf16 words to float32."},
    {"quantize_pack", py_quantize_pack, METH_VARARGS, "Quantize rows and pack the codes."},
    {"simd", py_simd, METH_VARARGS, "Whether the AVX2 loops run (set with a bool)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kvq_native", "kvq's non-BLAS loops in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kvq_native(void)
{
#if KVQ_X86
    __builtin_cpu_init();
    have_simd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#endif
    use_simd = have_simd;
    return PyModule_Create(&module);
}
