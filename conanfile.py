# SPDX-License-Identifier: Apache-2.0
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy

required_conan_version = ">=2.0"


class HeadroomConan(ConanFile):
    name = "headroom"
    version = "0.1.0"
    description = "Header-only C++20 memory-aware parallel primitives for GPU training engines"
    license = "Apache-2.0"
    topics = ("cuda", "nccl", "mpi", "memory-pool", "distributed-training", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    # The options say which components a consumer uses. The package itself is the same for
    # every value (headers + a CMake config with all components), so package_id clears them;
    # a component's dependencies (CUDA toolkit, NCCL, MPI) come from the system, found by the
    # package's own CMake config when a consumer asks for that component.
    options = {"cuda": [True, False], "nccl": [True, False], "mpi": [True, False]}
    default_options = {"cuda": False, "nccl": False, "mpi": False}
    exports_sources = "CMakeLists.txt", "cmake/*", "include/*", "LICENSE*"
    no_copy_source = True

    def layout(self):
        cmake_layout(self)

    def validate(self):
        check_min_cppstd(self, 20)
        if self.options.nccl and not self.options.cuda:
            raise ConanInvalidConfiguration("headroom: option nccl=True needs cuda=True")

    def generate(self):
        tc = CMakeToolchain(self)
        # Installing needs no dependency: the component targets are exported whatever is found.
        for opt in ("CUDA", "NCCL", "MPI", "TESTS", "EXAMPLES", "BENCH"):
            tc.cache_variables[f"HEADROOM_ENABLE_{opt}"] = False
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.install()

    def package_id(self):
        self.info.clear()

    def package_info(self):
        cmake_dir = os.path.join("share", "cmake", "headroom")
        # CMake consumers use the package's own headroomConfig.cmake (components, FindNCCL,
        # CCCL from the toolkit) instead of a CMakeDeps-generated one.
        self.cpp_info.set_property("cmake_file_name", "headroom")
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = [cmake_dir]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        # Components, for the other generators (PkgConfigDeps and friends).
        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "headroom::core")
        core.builddirs = [cmake_dir]
        core.bindirs = []
        core.libdirs = []
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "headroom::cuda")
            cuda.requires = ["core"]
            cuda.system_libs = ["cudart"]
            cuda.bindirs = []
            cuda.libdirs = []
        if self.options.nccl:
            nccl = self.cpp_info.components["nccl"]
            nccl.set_property("cmake_target_name", "headroom::nccl")
            nccl.requires = ["cuda"]
            nccl.system_libs = ["nccl"]
            nccl.bindirs = []
            nccl.libdirs = []
        if self.options.mpi:
            mpi = self.cpp_info.components["mpi"]
            mpi.set_property("cmake_target_name", "headroom::mpi")
            mpi.requires = ["core"]
            mpi.bindirs = []
            mpi.libdirs = []
