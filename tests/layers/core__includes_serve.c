/* core must not see serve. */
#include "server.h"
int probe(void) { return 0; }
