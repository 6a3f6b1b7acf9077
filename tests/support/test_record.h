/* The engine tests' own thread record and test library: one home for what the
 * C publishers under tests/unit/data/ write and what the C++ tests read
 * (test_record_layout.hpp), so that no engine test borrows a protocol's record,
 * symbols or library name.
 *
 * The record is fixed-size, 41 bytes, its valid byte (any non-zero value) near
 * the start and its presence byte in the middle:
 *
 *   0   version  2 bytes (native uint16, non-zero once the record is set up)
 *   2   flags    1
 *   3   valid    1
 *   4   context  16
 *   20  present  1
 *   21  owner    8
 *   29  stamp    12
 */
#ifndef TRACECORR_TESTS_TEST_RECORD_H
#define TRACECORR_TESTS_TEST_RECORD_H

#define TC_TEST_RECORD_SIZE 41
#define TC_TEST_RECORD_VERSION_OFFSET 0
#define TC_TEST_RECORD_VERSION_SIZE 2
#define TC_TEST_RECORD_FLAGS_OFFSET 2
#define TC_TEST_RECORD_VALID_OFFSET 3
#define TC_TEST_RECORD_CONTEXT_OFFSET 4
#define TC_TEST_RECORD_CONTEXT_SIZE 16
#define TC_TEST_RECORD_PRESENT_OFFSET 20
#define TC_TEST_RECORD_OWNER_OFFSET 21
#define TC_TEST_RECORD_OWNER_SIZE 8
#define TC_TEST_RECORD_STAMP_OFFSET 29
#define TC_TEST_RECORD_STAMP_SIZE 12
#define TC_TEST_RECORD_VERSION 3

#include <stdint.h>

/* Sets up the whole record as carrying `serial`: version, flags, valid and
 * present set, owner = serial (native byte order), every context and stamp
 * byte derived from it. What a publisher of complete records writes
 * (published_record_target.c) and what a test expects to read back. */
static inline void tc_test_record_fill(uint8_t *record, uint64_t serial)
{
    const uint16_t version = TC_TEST_RECORD_VERSION;
    __builtin_memcpy(record + TC_TEST_RECORD_VERSION_OFFSET, &version, sizeof version);
    record[TC_TEST_RECORD_FLAGS_OFFSET] = (uint8_t)(serial & 1);
    record[TC_TEST_RECORD_VALID_OFFSET] = 1;
    for (unsigned i = 0; i < TC_TEST_RECORD_CONTEXT_SIZE; ++i)
        record[TC_TEST_RECORD_CONTEXT_OFFSET + i] = (uint8_t)(serial + i);
    record[TC_TEST_RECORD_PRESENT_OFFSET] = 1;
    __builtin_memcpy(record + TC_TEST_RECORD_OWNER_OFFSET, &serial, sizeof serial);
    for (unsigned i = 0; i < TC_TEST_RECORD_STAMP_SIZE; ++i)
        record[TC_TEST_RECORD_STAMP_OFFSET + i] = (uint8_t)(serial * 7 + i);
}

/* The test library (tests/unit/data/tls_test_library.c): a TLS pointer to the
 * thread's record and a data pointer to a process-wide area, by these names. */
#define TC_TEST_TLS_SYMBOL tc_test_thread_record
#define TC_TEST_PROCESS_SYMBOL tc_test_process_area

#endif
