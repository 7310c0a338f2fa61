/* librdmig: RDMA live-migration transport.  See rdmig(3) and rdmig(7). */
#ifndef RDMIG_H
#define RDMIG_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RDMIG_API __attribute__((visibility("default")))
#else
#define RDMIG_API
#endif

/* The library version, "MAJOR.MINOR.PATCH". */
RDMIG_API const char *rdmig_version(void);

#ifdef __cplusplus
}
#endif
#endif
