/* sim must not see engine (it models steps, it runs no model). */
#include "model.h"
int probe(void) { return 0; }
