// Bounds how many test cases Swift Testing runs at once in the test process: eight per core
// (16 on two cores), unless SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH is already set.
//
// Unbounded, the whole suite started every test at once: on two cores over a hundred
// downloads, servers and daemons shared Swift's two cooperative threads, and an in-process
// test server could go unscheduled past a client's 10 s read timeout (a retry the test did
// not expect). Bounded, the suite takes the same time and no pool goes silent. Swift Testing
// reads the variable when it starts, so it is set by a constructor, before main: a plain
// `swift test` gets it.
#include "CHaulTestWidth.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const variable = "SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH";

__attribute__((constructor)) static void chaul_bound_test_parallelization(void) {
    if (getenv(variable) != NULL) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    char width[32];
    snprintf(width, sizeof width, "%ld", cores * 8);
    setenv(variable, width, 0);
}

int chaul_test_parallelization_width(void) {
    const char *value = getenv(variable);
    return value == NULL ? 0 : atoi(value);
}
