/* A stand-in for a protocol's library, in the variants the ELF, discovery and
 * TLS readers must tell apart, with the engine tests' own symbols
 * (tests/support/test_record.h: a TLS pointer to the thread's record, a data
 * pointer to a process-wide area). Which variant is chosen by compile
 * definitions:
 *   TC_PLAIN_GLOBAL  the TLS symbol is an ordinary global
 *   TC_NO_SYMBOLS    neither symbol exists
 * The TLS dialect comes from the compiler flags (-mtls-dialect=gnu2/gnu/desc/trad).
 * Accessors make the library reference its own variables: a relocation exists
 * only for a variable the library uses. */
#include <stddef.h>

#include "test_record.h"

#if defined(TC_NO_SYMBOLS)
__thread void* unrelated_thread_local = NULL;
void* unrelated_global = NULL;
#define TLS_VAR unrelated_thread_local
#define PROCESS_VAR unrelated_global
#elif defined(TC_PLAIN_GLOBAL)
void* TC_TEST_TLS_SYMBOL = NULL;
void* TC_TEST_PROCESS_SYMBOL = NULL;
#define TLS_VAR TC_TEST_TLS_SYMBOL
#define PROCESS_VAR TC_TEST_PROCESS_SYMBOL
#else
__thread void* TC_TEST_TLS_SYMBOL = NULL;
void* TC_TEST_PROCESS_SYMBOL = NULL;
#define TLS_VAR TC_TEST_TLS_SYMBOL
#define PROCESS_VAR TC_TEST_PROCESS_SYMBOL
#endif

void* tc_test_tls_address(void) { return &TLS_VAR; }
void tc_test_set_record(void* record) { TLS_VAR = record; }
void tc_test_publish_area(void* area) { PROCESS_VAR = area; }
