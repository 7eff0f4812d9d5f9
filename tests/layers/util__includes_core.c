/* util must not see core. */
#include "fq.h"
int probe(void) { return 0; }
