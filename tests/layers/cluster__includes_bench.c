/* cluster must not see the load generator beside it. */
#include "loadgen.h"
int probe(void) { return 0; }
