# SPDX-License-Identifier: Apache-2.0
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class HeadroomTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        opts = self.dependencies["headroom"].options
        tc = CMakeToolchain(self)
        if opts.cuda:
            # CMake < 3.26 knows no nvcc flag for C++20, and the toolchain's CMAKE_CXX_STANDARD
            # (also read by enable_language(CUDA)'s checks) would apply C++20 to CUDA sources and
            # fail. headroom::core asks for C++20 itself; headroom::cuda passes -std=c++20 to nvcc.
            tc.blocks.remove("cppstd")
        tc.cache_variables["HEADROOM_TEST_CUDA"] = bool(opts.cuda)
        tc.cache_variables["HEADROOM_TEST_NCCL"] = bool(opts.nccl)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        # The core program runs anywhere; the CUDA one is only compiled and linked (CI has no GPU).
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
