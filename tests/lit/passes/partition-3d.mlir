// RUN: cpc-opt %s -split-input-file --cpc-partition | FileCheck %s

// The 3D matmul on a 2 x 2 x 2 mesh (tp_wt x tp_in x tp_out): each operand has the three axes on
// its two matrix dims, as 3D tensor parallelism lays out a Linear's input [b/q^2 over (tp_wt,
// tp_in), s, h/q over tp_out] and weight (torch's [out, in]) [out/q over tp_in, in/q^2 over
// (tp_out, tp_wt)]. The inputs are what cpc-propagate-sharding writes; the output is the program
// of one of the 8 ranks.

// Tests that the forward Linear gathers its input over tp_in and its weight over tp_wt (each
// dim's minor axis), multiplies, and reduce-scatters the product over tp_out along its rows:
// the result [b/q^2 over (tp_wt, tp_out), s, out/q over tp_in] has tp_in and tp_out swapped.
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 6, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp_in"], ["tp_out", "tp_wt"]]>} : tensor<3x2xf32>
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x4xf32>
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<3x2xf32>
// CHECK: %[[XG:.*]] = cpc.all_gather %[[X]] over @mesh ["tp_in"] : tensor<2x3x4xf32> -> tensor<4x3x4xf32>
// CHECK: %[[WG:.*]] = cpc.all_gather %[[W]] over @mesh ["tp_wt"] {dim = 1 : i64} : tensor<3x2xf32> -> tensor<3x4xf32>
// CHECK: %[[P:.*]] = cpc.matmul %[[XG]], %[[WG]] {transpose_rhs = true} : (tensor<4x3x4xf32>, tensor<3x4xf32>) -> tensor<4x3x3xf32>
// CHECK: %[[Y:.*]] = cpc.reduce_scatter %[[P]] over @mesh ["tp_out"] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_wt", "tp_out"], [], ["tp_in"]]>]} : tensor<4x3x3xf32> -> tensor<2x3x3xf32>
// CHECK: return %[[Y]]
#x = #cpc.sharding<@mesh, [["tp_wt", "tp_in"], [], ["tp_out"]]>
#w = #cpc.sharding<@mesh, [["tp_in"], ["tp_out", "tp_wt"]]>
#y = #cpc.sharding<@mesh, [["tp_wt", "tp_out"], [], ["tp_in"]]>
cpc.mesh @mesh shape = [2, 2, 2] axes = ["tp_wt", "tp_in", "tp_out"] roles = [#cpc.axis_role<tensor_weight>, #cpc.axis_role<tensor_input>, #cpc.axis_role<tensor_output>]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @forward(%x: tensor<8x3x8xf32> {cpc.sharding = #x}) -> tensor<8x3x6xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %y = cpc.matmul %x, %w {cpc.shardings = [#y], transpose_rhs = true} : (tensor<8x3x8xf32>, tensor<6x8xf32>) -> tensor<8x3x6xf32>
  return %y : tensor<8x3x6xf32>
}

// -----

// Tests that the input gradient dX = dY W gathers dY over tp_out and the weight over tp_wt and
// reduce-scatters over tp_in: dX comes out laid out as the forward input.
// CHECK-LABEL: func.func @input_gradient
// CHECK: cpc.all_gather %{{.*}} over @mesh ["tp_out"] : tensor<2x3x3xf32> -> tensor<4x3x3xf32>
// CHECK: cpc.all_gather %{{.*}} over @mesh ["tp_wt"] {dim = 1 : i64} : tensor<3x2xf32> -> tensor<3x4xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<4x3x3xf32>, tensor<3x4xf32>) -> tensor<4x3x4xf32>
// CHECK: cpc.reduce_scatter %{{.*}} over @mesh ["tp_in"] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_wt", "tp_in"], [], ["tp_out"]]>]} : tensor<4x3x4xf32> -> tensor<2x3x4xf32>
#act = #cpc.sharding<@mesh, [["tp_wt", "tp_out"], [], ["tp_in"]]>
#x = #cpc.sharding<@mesh, [["tp_wt", "tp_in"], [], ["tp_out"]]>
#w = #cpc.sharding<@mesh, [["tp_in"], ["tp_out", "tp_wt"]]>
cpc.mesh @mesh shape = [2, 2, 2] axes = ["tp_wt", "tp_in", "tp_out"] roles = [#cpc.axis_role<tensor_weight>, #cpc.axis_role<tensor_input>, #cpc.axis_role<tensor_output>]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @input_gradient(%g: tensor<8x3x6xf32> {cpc.sharding = #act}) -> tensor<8x3x8xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %dx = cpc.matmul %g, %w {cpc.shardings = [#x]} : (tensor<8x3x6xf32>, tensor<6x8xf32>) -> tensor<8x3x8xf32>
  return %dx : tensor<8x3x8xf32>
}

// -----

// Tests that the weight gradient dW = dY^T X (the batch rows flattened) gathers dY over tp_out
// and X over tp_in, the rows they share left on tp_wt, and reduce-scatters over tp_wt along
// dW's rows: dW comes out laid out as the weight, its output features over (tp_in, tp_wt).
// CHECK-LABEL: func.func @weight_gradient
// CHECK: cpc.all_gather %{{.*}} over @mesh ["tp_out"] : tensor<6x4xf32> -> tensor<12x4xf32>
// CHECK: cpc.all_gather %{{.*}} over @mesh ["tp_in"] : tensor<6x4xf32> -> tensor<12x4xf32>
// CHECK: cpc.matmul {{.*}}transpose_lhs = true{{.*}} : (tensor<12x4xf32>, tensor<12x4xf32>) -> tensor<4x4xf32>
// CHECK: cpc.reduce_scatter %{{.*}} over @mesh ["tp_wt"] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_in", "tp_wt"], ["tp_out"]]>]} : tensor<4x4xf32> -> tensor<2x4xf32>
#g = #cpc.sharding<@mesh, [["tp_wt", "tp_out"], ["tp_in"]]>
#a = #cpc.sharding<@mesh, [["tp_wt", "tp_in"], ["tp_out"]]>
#w = #cpc.sharding<@mesh, [["tp_in", "tp_wt"], ["tp_out"]]>
cpc.mesh @mesh shape = [2, 2, 2] axes = ["tp_wt", "tp_in", "tp_out"] roles = [#cpc.axis_role<tensor_weight>, #cpc.axis_role<tensor_input>, #cpc.axis_role<tensor_output>]
func.func @weight_gradient(%g: tensor<24x8xf32> {cpc.sharding = #g}, %a: tensor<24x8xf32> {cpc.sharding = #a}) -> tensor<8x8xf32> {
  %dw = cpc.matmul %g, %a {cpc.shardings = [#w], transpose_lhs = true} : (tensor<24x8xf32>, tensor<24x8xf32>) -> tensor<8x8xf32>
  return %dw : tensor<8x8xf32>
}
