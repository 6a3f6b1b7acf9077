/* A stand-in for Elastic's agent library, named and built as the registry
 * says (elastic-jvmti-linux-unittest.so, TLSDESC), exporting the protocol's
 * two symbols. Elastic's inspect tests dlopen it, and tests/hostile's targets
 * publish through it (tests/py/test_hostile.py). The accessors let a test set
 * what the library publishes; they make the library reference its own
 * variables, so that the TLS relocation exists. */
#include <stddef.h>

__thread void* elastic_apm_profiling_correlation_tls_v1 = NULL;
void* elastic_apm_profiling_correlation_process_storage_v1 = NULL;

void tc_test_set_record(void* record) { elastic_apm_profiling_correlation_tls_v1 = record; }
void tc_test_publish_storage(void* storage) { elastic_apm_profiling_correlation_process_storage_v1 = storage; }
