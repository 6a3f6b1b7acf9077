// The probe catalogue's parts (one factory per area) and helpers they share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

std::unique_ptr<Probe> make_elf_probe();
std::unique_ptr<Probe> make_proc_probe();
std::unique_ptr<Probe> make_tls_probe();
std::unique_ptr<Probe> make_sock_probe();
std::unique_ptr<Probe> make_msg_probe();
std::unique_ptr<Probe> make_attr_probe();
std::unique_ptr<Probe> make_defer_probe();
std::unique_ptr<Probe> make_conf_probe();
std::unique_ptr<Probe> make_host_probe();

// Every requirement as not applicable: the sessions it needs did not run
// (attach mode, or --only left them out).
std::vector<Finding> not_run(const std::vector<std::string>& ids, const std::string& why = "");

// The suite (suite.cpp), for register_protocol().
const conform::Suite& suite();

}  // namespace tracecorr::elastic_v1
