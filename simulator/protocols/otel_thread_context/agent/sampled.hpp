// OTEP 4947 as a sampled protocol (tracecorr/sampled_protocol.hpp): the host
// agent samples every thread's record in whatever TLS model the variable
// lives, dynamic TLS included, and lists per thread the ids, flags and
// attributes (named through the key map the process context publishes) it
// read. Registered with the package (inspect/register.cpp).
#pragma once

#include "otel_thread_context/record.hpp"
#include "tracecorr/sampled_protocol.hpp"

namespace tracecorr::otel_thread_context {

const SampledProtocol& sampled_protocol();

// The record as an exported observation's context (the host agent's OTLP
// profiles, sampled_protocol.hpp): a link when the record is readable
// (valid 1, TCTXR-07, 08) and its ids are not all zero (a thread outside any
// trace), its trace flags then, and `named`'s attributes by key (a value that
// is not UTF-8 as bytes). Not readable: no link, no flags, no attributes.
// Not settled when the key map lacked an index even after any refresh.
// policy.ignore_valid (a reader defect) links a record whatever its valid byte.
RecordContext record_context(const ThreadContextRecord& record, const NamedAttributes& named,
                             const ReadingPolicy& policy = {});

// The reader defects this package's reading code can show (reader_defects.hpp),
// and the reading policy the names in force make.
std::vector<ReaderDefect> thread_context_reader_defects();
ReadingPolicy reading_policy(const ReaderDefects& defects);

}  // namespace tracecorr::otel_thread_context
