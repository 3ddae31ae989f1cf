/* The machine's read bandwidth, as the decode benchmarks need it: T threads each sum their
 * share of a 1 GiB buffer (far past every cache) with 8 independent AVX2 accumulators (or
 * plain C without AVX2), 7 passes, the median printed as JSON {"threads": T, "gb_s": x}.
 * The decode figures of bench/compare_llamacpp.sh divide weight bytes per token x tok/s by it.
 *
 *   cc -O2 -mavx2 -pthread bench/read_bandwidth.c -o read_bandwidth && ./read_bandwidth 2
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

enum { kBytes = 1 << 30, kPasses = 7 };

typedef struct {
  const float* p;
  size_t n;
  double sum;
} Part;

static void* read_part(void* arg) {
  Part* t = (Part*)arg;
  double s = 0;
#ifdef __AVX2__
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
  for (size_t i = 0; i + 64 <= t->n; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(t->p + i + 8 * j));
  float out[8];
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  _mm256_storeu_ps(out, a[0]);
  for (int j = 0; j < 8; ++j) s += out[j];
#else
  for (size_t i = 0; i < t->n; ++i) s += t->p[i];
#endif
  t->sum = s;
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (threads < 1 || threads > 256) {
    fprintf(stderr, "error: threads must be in [1, 256]\n");
    return 1;
  }
  float* buf = aligned_alloc(64, kBytes);
  if (!buf) {
    fprintf(stderr, "error: cannot allocate 1 GiB\n");
    return 1;
  }
  memset(buf, 0x3f, kBytes); /* touch every page first; 0x3f3f3f3f is a normal float */
  const size_t n = kBytes / sizeof(float), per = n / threads / 64 * 64;
  double gbs[kPasses], check = 0;
  pthread_t tid[256];
  Part parts[256];
  for (int pass = 0; pass < kPasses; ++pass) {
    const double t0 = now();
    for (int i = 0; i < threads; ++i) {
      parts[i] = (Part){buf + i * per, per, 0};
      pthread_create(&tid[i], NULL, read_part, &parts[i]);
    }
    for (int i = 0; i < threads; ++i) pthread_join(tid[i], NULL);
    gbs[pass] = (double)per * threads * sizeof(float) / (now() - t0) * 1e-9;
    for (int i = 0; i < threads; ++i) check += parts[i].sum;
  }
  qsort(gbs, kPasses, sizeof gbs[0], cmp);
  printf("{\"threads\": %d, \"gb_s\": %.2f, \"check\": %g}\n", threads, gbs[kPasses / 2], check);
  free(buf);
  return 0;
}
