/* gpucat.c - the GPU catalog table; see gpucat.h.
 *
 * Tags as in shared/reference/gpu-sharing-facts.md: [V] checked against
 * NVIDIA documentation or a real nvidia-smi transcript, [S] secondary
 * source only, [U] unverified (an estimate, or sources disagree), [D]
 * derived here from the other numbers. Throughput is dense (datasheets
 * quote twice as much "with sparsity"). Sources:
 *   MIG:    NVIDIA MIG user guide v580 (docs.nvidia.com/datacenter/tesla/
 *           mig-user-guide), Tables 6-9; -lgip transcripts cited per row.
 *           The guide's tables ("Supported MIG Profiles") give each
 *           profile's SMs only as a fraction (1/7, 2/7, 3/7, 4/7, full):
 *           every SM count here comes from an -lgip transcript, tagged per
 *           row; on Hopper they are not the fraction times the whole (an
 *           H100 SXM 3g.40gb has 60 of 132, not 56.6).
 *   Specs:  glennklockwood.com/garden/processors/A100 and /H100 (citing the
 *           NVIDIA datasheets), hpctech.co.jp H100 SXM/PCIe table, the H200
 *           product page, the L40S datasheet, the L4 datasheet; SM counts
 *           from the JAX GPU spec table [S] and deviceQuery (L4) [V].
 * Usable memory of a whole GPU is the 7g profile's -lgip figure where there
 * is one (what a process can allocate, which is less than the marketing
 * size), otherwise the nvidia-smi total as noted. The last field, where a
 * row has it, is that nvidia-smi total in MiB as the transcript shows it:
 * the Kubernetes emitter asks no more of a GPU than the driver reports
 * (45 GiB is 46080 MiB, 12 more than an L40S has).
 *
 * The GI profile order in every row is 19, 20, 15, 14, 9, 5, 0, the order
 * of mig.h's geometry table.
 */
#include "gpucat.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const gpucat_gpu CATALOG[] = {
    /* A100 SXM4 40GB. Specs [V] datasheet; MIG from -lgip transcripts and
     * guide Table 6 [V]. 1g.10gb (id 15) may need R525+ drivers [U]. */
    {"A100-40GB", 39.25, 1555, 312, 0, 108, 64, 7,
     {{"1g.5gb", 19, 14, 4.75},
      {"1g.5gb+me", 20, 14, 4.75},
      {"1g.10gb", 15, 14, 9.62},
      {"2g.10gb", 14, 28, 9.62},
      {"3g.20gb", 9, 42, 19.50},
      {"4g.20gb", 5, 56, 19.50},
      {"7g.40gb", 0, 98, 39.25}}, 0},
    /* A100 SXM4 80GB. Specs [V]; MIG memory from -lgip (+-0.25 GiB by
     * driver) [V], SMs as on A100-40GB [V]. */
    {"A100-80GB", 79.00, 2039, 312, 0, 108, 64, 7,
     {{"1g.10gb", 19, 14, 9.50},
      {"1g.10gb+me", 20, 14, 9.50},
      {"1g.20gb", 15, 14, 19.50},
      {"2g.20gb", 14, 28, 19.50},
      {"3g.40gb", 9, 42, 39.25},
      {"4g.40gb", 5, 56, 39.25},
      {"7g.80gb", 0, 98, 79.00}}, 0},
    /* H100 SXM5 80GB. Specs [V]; MIG from guide Table 7 and the -lgip
     * transcript at jbarrow.ai/field_notes/nvidia-mig [V]. Hopper SMs are
     * not 16 per slice: 1g.20gb has 26, 3g.40gb 60. */
    {"H100-80GB", 79.25, 3350, 989.4, 1978.9, 132, 128, 7,
     {{"1g.10gb", 19, 16, 9.75},
      {"1g.10gb+me", 20, 16, 9.75},
      {"1g.20gb", 15, 26, 19.62},
      {"2g.20gb", 14, 32, 19.62},
      {"3g.40gb", 9, 60, 39.50},
      {"4g.40gb", 5, 64, 39.50},
      {"7g.80gb", 0, 132, 79.25}}, 0},
    /* H100 PCIe 80GB. Specs [S] (hpctech.co.jp), 114 SMs [S]. Profile names
     * as on the SXM part [S]. Per-profile SMs from an `nvidia-smi mig -lgip`
     * transcript, driver 570.169 [S]: 1g.20gb 14, 2g.20gb 30, 3g.40gb 46,
     * 4g.40gb 62. The MIG guide's tables give only fractions (1/7, 2/7,
     * ...) and the SXM counts are not a guide here: the PCIe part's 1g.20gb
     * has no more SMs than a 1g. 1g.10gb(+me) 14 as the transcript's other
     * 1g [U]; 7g the whole GPU's 114 [U]; memory as on the SXM [U]. */
    {"H100-PCIe", 79.25, 2000, 756, 1513, 114, 128, 7,
     {{"1g.10gb", 19, 14, 9.75},
      {"1g.10gb+me", 20, 14, 9.75},
      {"1g.20gb", 15, 14, 19.62},
      {"2g.20gb", 14, 30, 19.62},
      {"3g.40gb", 9, 46, 39.50},
      {"4g.40gb", 5, 62, 39.50},
      {"7g.80gb", 0, 114, 79.25}}, 0},
    /* H100 NVL 94GB. Specs [U] (bandwidth 3.9 TB/s, ~835 dense FP16);
     * MIG SMs and memory from an Azure -lgip transcript [S]. */
    {"H100-94GB", 93.12, 3900, 835, 1671, 132, 128, 7,
     {{"1g.12gb", 19, 16, 10.75},
      {"1g.12gb+me", 20, 16, 10.75},
      {"1g.24gb", 15, 26, 21.62},
      {"2g.24gb", 14, 32, 21.62},
      {"3g.47gb", 9, 60, 46.38},
      {"4g.47gb", 5, 64, 46.38},
      {"7g.94gb", 0, 132, 93.12}}, 0},
    /* H200 SXM 141GB. Specs [S] (product page); profile names and counts
     * guide Table 8 [V]; SMs 2g=32, 3g=60, 4g=64 observed [S], 1g=16,
     * 1g.35gb=26, 7g=132 assumed as on H100 [U]. Usable memory [U]: the
     * H100 -lgip fractions of the whole (0.1225, 0.2465, 0.496, 0.9956)
     * applied to the 140.4 GiB nvidia-smi total. */
    {"H200-141GB", 139.75, 4800, 989, 1979, 132, 128, 7,
     {{"1g.18gb", 19, 16, 17.00},
      {"1g.18gb+me", 20, 16, 17.00},
      {"1g.35gb", 15, 26, 34.50},
      {"2g.35gb", 14, 32, 34.50},
      {"3g.71gb", 9, 60, 69.50},
      {"4g.71gb", 5, 64, 69.50},
      {"7g.141gb", 0, 132, 139.75}}, 0},
    /* B200 180GB. Specs [U]: 8 TB/s, 2.25 PFLOP/s dense FP16 and 4.5 FP8
     * per GPU (half the HGX B200 sparse figures), PCIe Gen5 host link.
     * Profile names and counts guide Table 9 [V]; 148 SMs and 1g.23gb = 18
     * SMs [S]; other SMs are the H100 counts scaled by 148/132, rounded to
     * even [U]; memory the H100 fractions of a 179 GiB total [U]. */
    {"B200", 178.25, 8000, 2250, 4500, 148, 128, 7,
     {{"1g.23gb", 19, 18, 21.75},
      {"1g.23gb+me", 20, 18, 21.75},
      {"1g.45gb", 15, 28, 44.00},
      {"2g.45gb", 14, 36, 44.00},
      {"3g.90gb", 9, 68, 88.75},
      {"4g.90gb", 5, 72, 88.75},
      {"7g.180gb", 0, 148, 178.25}}, 0},
    /* GH200 (the Hopper GPU of the Grace Hopper superchip, 96 GB HBM3).
     * Specs [S]: 4.0 TB/s, 989 dense FP16/BF16 and 1979 FP8 TFLOP/s and 132
     * SMs as the H100 SXM (NVIDIA GH200 datasheet as quoted at
     * aiwiki.ai/wiki/nvidia_gh200 and anandtech 21136); host link
     * NVLink-C2C, 900 GB/s both directions [S]. Profile names [S] (facts
     * file, 1.2). SMs: 1g.24gb 26 and 2g.24gb 32 from the University of
     * Tokyo's Miyabi-G MIG page (cc.u-tokyo.ac.jp, "32 SMs, 24 GB" and
     * "26 SMs, 24 GB") [S]; 1g 16, 3g 60, 4g 64, 7g 132 as on the H100 SXM
     * [U]. Memory [U]: the H100 NVL -lgip figures scaled by 96/94. The
     * 144 GB HBM3e GH200 is omitted: no profile names or -lgip for it. */
    {"GH200", 95.00, 4000, 989, 1979, 132, 900, 7,
     {{"1g.12gb", 19, 16, 11.00},
      {"1g.12gb+me", 20, 16, 11.00},
      {"1g.24gb", 15, 26, 22.00},
      {"2g.24gb", 14, 32, 22.00},
      {"3g.48gb", 9, 60, 47.25},
      {"4g.48gb", 5, 64, 47.25},
      {"7g.96gb", 0, 132, 95.00}}, 0},
    /* B300 (Blackwell Ultra, HGX) 288 GB HBM3e. Specs [S]: 8 TB/s, 2250
     * dense FP16/BF16 and 4500 dense FP8 TFLOP/s, PCIe Gen6 x16 host link
     * (glennklockwood.com/garden/processors/B300, citing the HGX B300
     * datasheet; verda.com's GB300 post gives the same dense figures and
     * 7.7 TB/s); 160 SMs (NVIDIA's Hot Chips 2025 description, as reported
     * by tweaktown.com) [S], a shipping part may enable fewer [U]. Profile
     * names and counts from aws/sagemaker-hyperpod-cli [S]. Per-profile
     * SMs [U]: the H100 -lgip fractions of the whole (16, 26, 32, 60, 64 of
     * 132) applied to 160, rounded to even. Memory [U]: 288 GB is 268.2
     * GiB, times the H100 -lgip fractions (0.1225, 0.2465, 0.496, 0.9956).
     * All of it wants `nvidia-smi mig -lgip` on a B300. */
    {"B300", 267.00, 8000, 2250, 4500, 160, 256, 7,
     {{"1g.34gb", 19, 20, 32.75},
      {"1g.34gb+me", 20, 20, 32.75},
      {"1g.67gb", 15, 32, 66.00},
      {"2g.67gb", 14, 38, 66.00},
      {"3g.135gb", 9, 72, 133.00},
      {"4g.135gb", 5, 78, 133.00},
      {"7g.269gb", 0, 160, 267.00}}, 0},
    /* A30 24GB HBM2. Specs [S]: 933 GB/s, 165 dense FP16/BF16 TFLOP/s (330
     * with sparsity), no FP8, 56 SMs, PCIe Gen4 x16 (NVIDIA A30 datasheet).
     * Usable 23.5 GiB [U]. MIG omitted: the A30 has 4 compute and 4 memory
     * slices (guide, "A30 MIG Profiles": 1g.6gb x4, 2g.12gb x2, 4g.24gb,
     * with other GI ids), a geometry mig.h's one 8-slice table does not
     * describe, so the planner offers it whole, MPS or time-sliced. */
    {"A30", 23.5, 933, 165, 0, 56, 64, 0, {{0}}, 0},
    /* H20 96GB HBM3 (export variant of Hopper). Specs [S]: 4.0 TB/s, 148
     * dense FP16/BF16 and 296 FP8 TFLOP/s (willitrunai.com/gpus/h20-96gb),
     * 78 SMs (Geekbench 6 listing, as reported at zangshuxian.com), PCIe
     * Gen5 x16. Usable 95 GiB [U] as the GH200 row. MIG omitted: NVIDIA
     * states up to 7 instances but no -lgip transcript gives the profiles'
     * names, SMs or memory, so the planner offers it whole, MPS or
     * time-sliced. The 141 GB H20 is omitted for the same reason. */
    {"H20", 95.0, 4000, 148, 296, 78, 128, 0, {{0}}, 0},
    /* L4 24GB: no MIG. Specs [S] (datasheet quote, 242.5 FP8 dense); 58
     * SMs from deviceQuery [V]; usable 22.5 GiB = nvidia-smi's 23034 MiB [U]. */
    {"L4", 22.5, 300, 121, 242.5, 58, 64, 0, {{0}}, 23034},
    /* L40S 48GB: no MIG. Specs [S] (datasheet table), 142 SMs [S]; usable
     * 45 GiB = nvidia-smi's 46068 MiB [U]. */
    {"L40S", 45.0, 864, 362, 733, 142, 64, 0, {{0}}, 46068},
};

#define N_CATALOG (sizeof(CATALOG) / sizeof(CATALOG[0]))

size_t gpucat_count(void) { return N_CATALOG; }

const gpucat_gpu *gpucat_at(size_t i) { return i < N_CATALOG ? &CATALOG[i] : NULL; }

const gpucat_gpu *gpucat_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_CATALOG; i++)
        if (strcasecmp(CATALOG[i].name, name) == 0) return &CATALOG[i];
    return NULL;
}

const gpucat_mig *gpucat_mig_find(const gpucat_gpu *g, const char *name) {
    if (!g || !name) return NULL;
    for (int i = 0; i < g->n_mig; i++)
        if (strcasecmp(g->mig[i].name, name) == 0) return &g->mig[i];
    return NULL;
}

const gpucat_mig *gpucat_mig_by_id(const gpucat_gpu *g, int gi_id) {
    if (!g) return NULL;
    for (int i = 0; i < g->n_mig; i++)
        if (g->mig[i].gi_id == gi_id) return &g->mig[i];
    return NULL;
}

void gpucat_names(char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    size_t len = 0;
    for (size_t i = 0; i < N_CATALOG && len < cap; i++) {
        int n = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", CATALOG[i].name);
        if (n < 0) break;
        len += (size_t)n;
    }
}
