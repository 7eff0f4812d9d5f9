/* cluster must not see engine. */
#include "gguf.h"
int probe(void) { return 0; }
