/* sim must not see serve (the simulator never serves). */
#include "metrics.h"
int probe(void) { return 0; }
