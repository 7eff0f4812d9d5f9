/* core must not see engine. */
#include "model.h"
int probe(void) { return 0; }
