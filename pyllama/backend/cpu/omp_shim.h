/* OpenMP shim: the kernels call these; without OpenMP they degrade to one thread. */
#ifndef PYLLAMA_OMP_SHIM_H
#define PYLLAMA_OMP_SHIM_H
#ifdef _OPENMP
#include <omp.h>
static inline int pyl_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int pyl_omp_thread_num(void) { return omp_get_thread_num(); }
static inline void pyl_omp_set_threads(int n) { omp_set_num_threads(n); }
#else
static inline int pyl_omp_max_threads(void) { return 1; }
static inline int pyl_omp_thread_num(void) { return 0; }
static inline void pyl_omp_set_threads(int n) { (void)n; }
#endif
#endif
