/* A stand-in for the agent library, in the variants the ELF and TLS readers
 * must tell apart. Which variant is chosen by compile definitions:
 *   TC_PLAIN_GLOBAL  the TLS symbol is an ordinary global (breaks ELF-03)
 *   TC_NO_SYMBOLS    neither protocol symbol exists
 * The TLS dialect comes from the compiler flags (-mtls-dialect=gnu2/gnu/desc).
 * Accessors make the library reference its own variable: a relocation exists
 * only for a variable the library uses. */
#include <stddef.h>

#if defined(TC_NO_SYMBOLS)
__thread void* unrelated_thread_local = NULL;
void* unrelated_global = NULL;
#define TLS_VAR unrelated_thread_local
#define STORAGE_VAR unrelated_global
#elif defined(TC_PLAIN_GLOBAL)
void* elastic_apm_profiling_correlation_tls_v1 = NULL;
void* elastic_apm_profiling_correlation_process_storage_v1 = NULL;
#define TLS_VAR elastic_apm_profiling_correlation_tls_v1
#define STORAGE_VAR elastic_apm_profiling_correlation_process_storage_v1
#else
__thread void* elastic_apm_profiling_correlation_tls_v1 = NULL;
void* elastic_apm_profiling_correlation_process_storage_v1 = NULL;
#define TLS_VAR elastic_apm_profiling_correlation_tls_v1
#define STORAGE_VAR elastic_apm_profiling_correlation_process_storage_v1
#endif

void* tc_test_tls_address(void) { return &TLS_VAR; }
void tc_test_set_record(void* record) { TLS_VAR = record; }
void tc_test_publish_storage(void* storage) { STORAGE_VAR = storage; }
