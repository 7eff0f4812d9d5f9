/*
 * gpucat.h - the GPU catalog: what the planner knows about each GPU type it
 * can place work on, as one constant table (gpucat.c) with the source of
 * every number beside it.
 *
 * A row gives the whole GPU (usable memory, memory bandwidth, dense tensor
 * throughput, SM count, host link) and, for MIG-capable types, the GPU
 * instance profiles as `nvidia-smi mig -lgip` lists them: name, GI profile
 * id, SMs and usable memory. The geometry that is the same on every GPU
 * (compute slices, memory slices, valid start slots, instance limits) is
 * keyed by the GI profile id and lives in mig.h, so it is written once.
 * The table is read-only and owns nothing; this module never decides
 * anything, it only answers lookups. Numbers marked [U] in gpucat.c are
 * unverified estimates and should be checked against `nvidia-smi mig -lgip`
 * on real hardware before a plan that depends on them is trusted.
 */
#ifndef TS_GPUCAT_H
#define TS_GPUCAT_H

#include <stddef.h>

#define GPUCAT_MIG_MAX 7            /* GI profiles per GPU type (ids 19,20,15,14,9,5,0) */

typedef struct gpucat_mig {
    const char *name;               /* "3g.40gb", as nvidia-smi, mig-parted and k8s name it */
    int gi_id;                      /* nvidia-smi GI profile id; mig_geom_find() gives its geometry */
    int sms;                        /* SMs of the instance (-lgip), not 7ths of the GPU */
    double mem_gib;                 /* usable memory of the instance, GiB */
} gpucat_mig;

typedef struct gpucat_gpu {
    const char *name;               /* canonical name used in input and output, "A100-80GB" */
    double mem_gib;                 /* usable memory of the whole GPU (MIG off), GiB */
    double bw_gbs;                  /* peak memory bandwidth, GB/s (1e9 B/s) */
    double fp16_tflops;             /* dense FP16/BF16 tensor peak, TFLOP/s */
    double fp8_tflops;              /* dense FP8 tensor peak, TFLOP/s; 0 = no FP8 */
    int sms;                        /* SMs of the whole GPU */
    double host_gbs;                /* host link, GB/s both directions together */
    int n_mig;                      /* GI profiles in mig[], 0 = no MIG */
    gpucat_mig mig[GPUCAT_MIG_MAX]; /* in GI-id table order of mig.h */
    int smi_mib;                    /* MiB the driver reports (nvidia-smi's total, NVML's), 0 = no
                                     * transcript: what the device plugin divides among MPS replicas
                                     * and HAMi registers, which mem_gib x 1024 may exceed */
} gpucat_gpu;

/* Number of GPU types in the catalog, and the i-th (0 <= i < count). */
size_t gpucat_count(void);
const gpucat_gpu *gpucat_at(size_t i);

/* The GPU type with this name, compared without regard to case; NULL if
 * the catalog has none. */
const gpucat_gpu *gpucat_find(const char *name);

/* The MIG profile of g named name ("2g.20gb", case-insensitive) or with GI
 * profile id gi_id; NULL if g has none such. */
const gpucat_mig *gpucat_mig_find(const gpucat_gpu *g, const char *name);
const gpucat_mig *gpucat_mig_by_id(const gpucat_gpu *g, int gi_id);

/* Comma-separated names of every type, for error messages ("A100-40GB,
 * A100-80GB, ..."), written into buf (cap bytes, NUL-terminated). */
void gpucat_names(char *buf, size_t cap);

#endif
