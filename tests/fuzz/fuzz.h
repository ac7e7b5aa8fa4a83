/*
 * libFuzzer harnesses over nspcomm's parsers (tests/fuzz/fuzz_*.c). Each
 * defines FUZZ_ENTRY: LLVMFuzzerTestOneInput when built by tests/fuzz/run.sh
 * with clang -fsanitize=fuzzer, the entry that tests/fuzz/replay.c calls
 * for every committed corpus input under `make check` otherwise. An entry
 * returns 0 and aborts on a broken property (libFuzzer reports it).
 */
#ifndef NSP_TESTS_FUZZ_FUZZ_H_
#define NSP_TESTS_FUZZ_FUZZ_H_

#include <stddef.h>
#include <stdint.h>

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

#include <stdlib.h>

/* Errors on bad input are the point: send the log to /dev/null (before the
 * first message: the log reads its variables once). */
static inline void fuzz_quiet(void)
{
    setenv("NSPCOMM_LOG_FILE", "/dev/null", 0);
}

#endif /* NSP_TESTS_FUZZ_FUZZ_H_ */
