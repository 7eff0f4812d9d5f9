/*
 * quant_legacy.c - the 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
 * and IQ4_NL (layouts in quant.h).
 */
#include "quant_int.h"

const quant_kind quant_legacy_kinds[] = {{0}};
const int quant_legacy_n = 0;
