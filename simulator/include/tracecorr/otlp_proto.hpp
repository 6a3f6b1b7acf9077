// OTLP's common values between tracecorr's model (otlp.hpp) and the classes
// generated from simulator/proto, for the engine's code that holds both: the
// encoders, and readers of other messages built from OTLP's common types (the
// process context). Neither conversion bounds anything: a reader checks the
// bytes before libprotobuf parses them.
#pragma once

#include "opentelemetry/proto/common/v1/common.pb.h"
#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp {

void to_proto(const AttributeValue& from, opentelemetry::proto::common::v1::AnyValue& to);
AttributeValue from_proto(const opentelemetry::proto::common::v1::AnyValue& from);
// Keys and values in order, duplicate keys kept.
std::vector<KeyValue> from_proto(const google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>& from);

}  // namespace tracecorr::otlp
