#include "rdmig.h"

#ifndef RDMIG_VERSION
#define RDMIG_VERSION "0.3.0"
#endif

const char *rdmig_version(void)
{
	return RDMIG_VERSION;
}
