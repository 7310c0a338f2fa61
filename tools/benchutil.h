/* What the native benchmarks (zerobench, dirtybench, regbench) share. */
#ifndef RDMIG_TOOLS_BENCHUTIL_H
#define RDMIG_TOOLS_BENCHUTIL_H

/* The median of @v[0..@n) (@n > 0); sorts @v in place. */
double bench_median(double *v, unsigned n);

#endif
