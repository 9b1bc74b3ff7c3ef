// RUN: cpc-opt %s --cpc-data-parallel="size=2 funcs=tied" | FileCheck %s

// Tests that a partial sum on its way into a sum with another partial sum (a tied weight's two
// gradients, one of them 16-bit and widened) is not reduce-scattered on its own: the widening
// and the add run on the partial values, and the f32 sum is reduce-scattered once where it is
// wanted split, rounding as the whole sum does.
// CHECK-LABEL: func.func @tied
// CHECK: %[[G1:.*]] = cpc.matmul {{.*}} -> tensor<4x6xbf16>
// CHECK-NOT: cpc.reduce_scatter
// CHECK: %[[W1:.*]] = cpc.cast %[[G1]] {{.*}}partial = ["dp"]{{.*}} : tensor<4x6xbf16> -> tensor<4x6xf32>
// CHECK: %[[G2:.*]] = cpc.matmul {{.*}} -> tensor<4x6xf32>
// CHECK: %[[SUM:.*]] = cpc.add %[[G2]], %[[W1]] {{.*}}partial = ["dp"]
// CHECK: cpc.reduce_scatter %[[SUM]] over @mesh ["dp"] : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK-NOT: cpc.reduce_scatter
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @tied(%x: tensor<4x4xbf16> {cpc.name = "x"}, %y: tensor<4x6xbf16> {cpc.name = "y"}, %a: tensor<4x4xf32> {cpc.name = "a"}, %b: tensor<4x6xf32> {cpc.name = "b"}) -> tensor<4x6xf32> {
  %g1 = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x4xbf16>, tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %w1 = cpc.cast %g1 : tensor<4x6xbf16> -> tensor<4x6xf32>
  %g2 = cpc.matmul %a, %b {transpose_lhs = true} : (tensor<4x4xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %sum = cpc.add %g2, %w1 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %rows = cpc.shard %sum to <@mesh, [["dp"], []]> : tensor<4x6xf32>
  %e = cpc.exp %rows : tensor<4x6xf32>
  return %e : tensor<4x6xf32>
}
