// The kernels other than da8w4 that torchao main's dispatch.cpp takes the address of in
// each ISA namespace it is built for, as stubs that raise: torchao_main_plugin.py builds
// dispatch.cpp with the kernel PR's da8w4_linear_krnl.cpp alone. Compiled once per
// namespace (-DSTUB_NS=DEFAULT, AVX512). Their signatures are dispatch.cpp's.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>

#ifndef STUB_NS
#error "define STUB_NS (DEFAULT, AVX512 or AVX10_2)"
#endif

namespace torchao {
namespace STUB_NS {

std::tuple<at::Tensor, at::Tensor> float8_linear_prepack_impl(const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK(false, "float8_linear_prepack_cpu: not in this test build");
}

at::Tensor float8_linear_impl(
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    const std::optional<at::Tensor>&,
    at::ScalarType) {
  TORCH_CHECK(false, "float8_linear_cpu: not in this test build");
}

at::Tensor _scaled_embedding_bag_impl(
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    double,
    const int64_t,
    bool,
    at::ScalarType) {
  TORCH_CHECK(false, "_scaled_embedding_bag: not in this test build");
}

at::Tensor _qscaled_dot_product_cpu(
    const at::Tensor&,
    const at::Tensor&,
    const at::Tensor&,
    std::optional<at::Tensor>,
    double,
    bool,
    std::optional<double>,
    double,
    int64_t,
    double,
    int64_t,
    double,
    int64_t,
    double,
    int64_t,
    double,
    int64_t) {
  TORCH_CHECK(false, "qscaled_dot_product: not in this test build");
}

}  // namespace STUB_NS
}  // namespace torchao
