// SPDX-License-Identifier: Apache-2.0
#pragma once
// One function per module, each in demo_<module>.cpp and called once from main.cpp.
#include "printer.hpp"

void demo_substrates(headroom::demo::printer& p);
void demo_lifetime(headroom::demo::printer& p);
void demo_pool(headroom::demo::printer& p);
void demo_stats(headroom::demo::printer& p);
void demo_cp(headroom::demo::printer& p);
void demo_pipeline(headroom::demo::printer& p);
void demo_trace(headroom::demo::printer& p);
