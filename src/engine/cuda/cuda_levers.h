/*
 * cuda_levers.h - the host-side decisions of the CUDA backend that need no
 * GPU: which device a "cuda[:N]" string names, what share of the device the
 * MPS environment grants this process, how many bytes its KV pool may take,
 * and which stream priority each scheduling band gets. Everything here is
 * pure (no CUDA call, no getenv: the caller passes the environment's
 * values in), so it is built and unit-tested in every build, with or without
 * nvcc; cuda_backend.c feeds it what the CUDA runtime reports.
 *
 * Bad values are refused with a message naming the variable and what is
 * wrong; nothing here guesses a meaning for a malformed setting, because a
 * guessed memory limit is an out-of-memory failure later, on a live server.
 */
#ifndef TS_CUDA_LEVERS_H
#define TS_CUDA_LEVERS_H

#include <stddef.h>
#include <stdint.h>

#define CUDALEV_MAX_DEVICE 1023

/* The device index of an engine backend string: "cuda" is device 0,
 * "cuda:N" device N (0..CUDALEV_MAX_DEVICE, decimal digits only). Returns 0,
 * or TS_ERR_INVAL with a message for anything else ("cuda:", "cuda:-1",
 * "cuda:1x", "cudax"). */
int cudalev_parse_device(const char *spec, int *index, char *err, size_t errlen);

/* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as this process sees it: NULL (unset)
 * means 100; otherwise a decimal number in (0, 100], as MPS takes it
 * (integer or with a fraction: "25", "12.5"). Out: *pct. TS_ERR_INVAL with a
 * message for an empty, negative, zero, over-100 or non-numeric value. */
int cudalev_parse_thread_pct(const char *val, double *pct, char *err, size_t errlen);

/* The limit CUDA_MPS_PINNED_DEVICE_MEM_LIMIT sets for one device, in bytes.
 * The variable is a comma-separated list of "<device>=<size>" entries, each
 * device a decimal index as this client sees it (after CUDA_VISIBLE_DEVICES
 * remapping, so a physical index would be wrong) or a GPU UUID
 * ("GPU-8932f937-..."), each size decimal digits with the suffix M (MiB) or
 * G (GiB). val NULL: no limit. uuid may be NULL (then only an index entry
 * can match). Out: *bytes, 0 when no entry names this device. Every entry
 * is checked, not only the matching one; an entry for the same device twice
 * is refused. TS_ERR_INVAL with a message otherwise. */
int cudalev_parse_pinned_limit(const char *val, int device, const char *uuid, uint64_t *bytes, char *err,
                               size_t errlen);

/* What the runtime reports about the device's memory when the KV pool is
 * about to be allocated (the weights and the scratch already are). */
typedef struct cudalev_mem {
    uint64_t free_bytes;    /* cudaMemGetInfo free: the whole GPU's, or on a
                             * MIG instance the slice's */
    uint64_t total_bytes;   /* cudaMemGetInfo total (the slice's on MIG) */
    uint64_t used_by_us;    /* bytes this engine has allocated on the device
                             * so far (weights, scratch) */
    uint64_t mps_limit;     /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for this
                             * device, 0 = none */
    uint64_t reserve;       /* bytes to leave free for the runtime, cuBLAS'
                             * workspaces and fragmentation */
} cudalev_mem;

/* Bytes the KV pool may take: what is free less the reserve, and under an
 * MPS limit no more than the limit less what this engine already holds
 * (the limit counts every allocation of the client, CUDA's own included,
 * and under MPS on MIG cudaMemGetInfo still reports the slice, not the
 * limit: so the limit must be applied here). 0 when nothing is left. */
uint64_t cudalev_kv_budget(const cudalev_mem *m);

/* The stream priority of band (0 = the highest tier, gold) of n_bands, for
 * a device whose cudaDeviceGetStreamPriorityRange gave least (the lowest
 * priority, numerically the largest: 0) and greatest (the highest,
 * numerically the smallest: -5 on Hopper). Band 0 gets greatest, the last
 * band least, the bands between spread evenly and rounded; with fewer
 * levels than bands neighbours share one, never out of order. A band
 * outside 0..n_bands-1 is clamped. */
int cudalev_band_priority(int band, int n_bands, int least, int greatest);

#endif
