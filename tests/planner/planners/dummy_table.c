/*
 * src/planner/planner_table.c with the test's line X(dummy) switched on:
 * test_planner_dummy links this object, so the library's own table (the
 * same file without the line) is not taken from libnspcomm_planner.
 */
#define NSP_PLANNER_TEST_DUMMY 1
#include "planner/planner_table.c"
