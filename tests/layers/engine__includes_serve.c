/* engine must not see serve. */
#include "worker.h"
int probe(void) { return 0; }
