/* bench must not see the engine: it measures the server from outside. */
#include "gguf.h"
int probe(void) { return 0; }
