#ifndef CHAUL_TEST_WIDTH_H
#define CHAUL_TEST_WIDTH_H

/// The number of test cases Swift Testing runs at once in this process, as set before it
/// started (see CHaulTestWidth.c); 0 when the environment left it unbounded.
int chaul_test_parallelization_width(void);

#endif
