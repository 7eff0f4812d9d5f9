/* cluster must not see serve. */
#include "config.h"
int probe(void) { return 0; }
