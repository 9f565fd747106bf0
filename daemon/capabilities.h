/* gllmd --capabilities: every compiled-in backend's declared capabilities as JSON. */
#ifndef GLLMD_CAPABILITIES_H
#define GLLMD_CAPABILITIES_H

#include <stdio.h>

void capabilities_print(FILE *f);

#endif
