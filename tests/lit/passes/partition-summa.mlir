// RUN: cpc-opt %s -split-input-file --cpc-partition | FileCheck %s

// SUMMA on a 2 x 2 grid (tp_row x tp_col): the operands of every matmul are split over the two
// axes, one per matrix dim, as 2D tensor parallelism lays out a Linear's input [b/q (row), s,
// h/q (column)] and weight [in/q (row), out/q (column)]. The inputs are what
// cpc-propagate-sharding writes; the output is the program of one of the 4 ranks.

// Tests that the forward Linear (torch's weight [out, in], read transposed) keeps its result
// where it is computed: step t broadcasts the input's column block t along the row of ranks
// and the weight's row block t along the column, multiplies and adds; no rank holds more than
// one block of either.
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 6, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp_col"], ["tp_row"]]>} : tensor<3x4xf32>
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x4xf32>
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<3x4xf32>
// CHECK: %[[X0:.*]] = cpc.broadcast_from %[[X]] over @mesh ["tp_col"] root 0 : tensor<2x3x4xf32>
// CHECK: %[[W0:.*]] = cpc.broadcast_from %[[W]] over @mesh ["tp_row"] root 0 : tensor<3x4xf32>
// CHECK: %[[P0:.*]] = cpc.matmul %[[X0]], %[[W0]] {transpose_rhs = true} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x3xf32>
// CHECK: %[[X1:.*]] = cpc.broadcast_from %[[X]] over @mesh ["tp_col"] root 1
// CHECK: %[[W1:.*]] = cpc.broadcast_from %[[W]] over @mesh ["tp_row"] root 1
// CHECK: %[[P1:.*]] = cpc.matmul %[[X1]], %[[W1]]
// CHECK: %[[Y:.*]] = cpc.add %[[P0]], %[[P1]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], [], ["tp_col"]]>]}
// CHECK: return %[[Y]] : tensor<2x3x3xf32>
#x = #cpc.sharding<@mesh, [["tp_row"], [], ["tp_col"]]>
#w = #cpc.sharding<@mesh, [["tp_col"], ["tp_row"]]>
cpc.mesh @mesh shape = [2, 2] axes = ["tp_row", "tp_col"] roles = [#cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @forward(%x: tensor<4x3x8xf32> {cpc.sharding = #x}) -> tensor<4x3x6xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %y = cpc.matmul %x, %w {cpc.shardings = [#x], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<6x8xf32>) -> tensor<4x3x6xf32>
  return %y : tensor<4x3x6xf32>
}

// -----

// Tests that the input gradient dX = dY W keeps dY where it is: step t broadcasts the weight's
// block of input features t along the column and reduces the product over the row of ranks to
// the owner of dX's column block t (zeros elsewhere, so the q results add up to each rank's).
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 6, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp_col"], ["tp_row"]]>} : tensor<3x4xf32>
// CHECK-LABEL: func.func @input_gradient
// CHECK-SAME: (%[[G:[^:]*]]: tensor<2x3x3xf32>
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<3x4xf32>
// CHECK: %[[W0:.*]] = cpc.broadcast_from %[[W]] over @mesh ["tp_row"] root 0 : tensor<3x4xf32>
// CHECK: %[[P0:.*]] = cpc.matmul %[[G]], %[[W0]] : (tensor<2x3x3xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[R0:.*]] = cpc.reduce_to %[[P0]] over @mesh ["tp_col"] root 0 : tensor<2x3x4xf32>
// CHECK: %[[W1:.*]] = cpc.broadcast_from %[[W]] over @mesh ["tp_row"] root 1
// CHECK: %[[P1:.*]] = cpc.matmul %[[G]], %[[W1]]
// CHECK: %[[R1:.*]] = cpc.reduce_to %[[P1]] over @mesh ["tp_col"] root 1
// CHECK: %[[DX:.*]] = cpc.add %[[R0]], %[[R1]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], [], ["tp_col"]]>]}
// CHECK: return %[[DX]] : tensor<2x3x4xf32>
#act = #cpc.sharding<@mesh, [["tp_row"], [], ["tp_col"]]>
#w = #cpc.sharding<@mesh, [["tp_col"], ["tp_row"]]>
cpc.mesh @mesh shape = [2, 2] axes = ["tp_row", "tp_col"] roles = [#cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @input_gradient(%g: tensor<4x3x6xf32> {cpc.sharding = #act}) -> tensor<4x3x8xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %dx = cpc.matmul %g, %w {cpc.shardings = [#act]} : (tensor<4x3x6xf32>, tensor<6x8xf32>) -> tensor<4x3x8xf32>
  return %dx : tensor<4x3x8xf32>
}

// -----

// Tests that the weight gradient of a weight stored [in, out] (y = x W) keeps the output
// gradient where it is, since the gradient is wanted laid out as the weight: step t
// broadcasts the input's block of rows t along the row of ranks, and the product, summed over
// the batch rows of the column, is reduced to the owner of the weight's row block t.
// CHECK-LABEL: func.func @weight_gradient
// CHECK-SAME: (%[[A:[^:]*]]: tensor<6x4xf32> {{.*}}, %[[G:[^:]*]]: tensor<6x3xf32>
// CHECK: %[[A0:.*]] = cpc.broadcast_from %[[A]] over @mesh ["tp_col"] root 0 : tensor<6x4xf32>
// CHECK: %[[P0:.*]] = cpc.matmul %[[A0]], %[[G]] {transpose_lhs = true} : (tensor<6x4xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[R0:.*]] = cpc.reduce_to %[[P0]] over @mesh ["tp_row"] root 0
// CHECK: cpc.broadcast_from %[[A]] over @mesh ["tp_col"] root 1
// CHECK: %[[R1:.*]] = cpc.reduce_to %{{.*}} over @mesh ["tp_row"] root 1
// CHECK: %[[DW:.*]] = cpc.add %[[R0]], %[[R1]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_row"], ["tp_col"]]>]}
// CHECK: return %[[DW]] : tensor<4x3xf32>
#rows = #cpc.sharding<@mesh, [["tp_row"], ["tp_col"]]>
cpc.mesh @mesh shape = [2, 2] axes = ["tp_row", "tp_col"] roles = [#cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
func.func @weight_gradient(%a: tensor<12x8xf32> {cpc.sharding = #rows}, %g: tensor<12x6xf32> {cpc.sharding = #rows}) -> tensor<8x6xf32> {
  %dw = cpc.matmul %a, %g {cpc.shardings = [#rows], transpose_lhs = true} : (tensor<12x8xf32>, tensor<12x6xf32>) -> tensor<8x6xf32>
  return %dw : tensor<8x6xf32>
}

// -----

// Tests that 2.5D's depth axis passes through: the batch rows are split over tp_dep and tp_row,
// so the weight gradient of torch's layout ([out, in]: dW = dY^T X, dY staying) comes out a
// partial sum over the depth, all-reduced before it is returned.
// CHECK-LABEL: func.func @depth
// CHECK: cpc.broadcast_from %{{.*}} over @mesh ["tp_col"] root 0 : tensor<3x4xf32>
// CHECK: cpc.reduce_to %{{.*}} over @mesh ["tp_row"] root 0 : tensor<3x4xf32>
// CHECK: cpc.reduce_to %{{.*}} over @mesh ["tp_row"] root 1 : tensor<3x4xf32>
// CHECK: %[[DW:.*]] = cpc.add {{.*}} {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp_col"], ["tp_row"]], partial = ["tp_dep"]>]}
// CHECK: %[[SUM:.*]] = cpc.all_reduce %[[DW]] over @mesh ["tp_dep"] : tensor<3x4xf32>
// CHECK: return %[[SUM]] : tensor<3x4xf32>
#rows = #cpc.sharding<@mesh, [["tp_dep", "tp_row"], ["tp_col"]]>
#w = #cpc.sharding<@mesh, [["tp_col"], ["tp_row"]]>
cpc.mesh @mesh shape = [2, 2, 2] axes = ["tp_dep", "tp_row", "tp_col"] roles = [#cpc.axis_role<tensor_depth>, #cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
func.func @depth(%g: tensor<12x6xf32> {cpc.sharding = #rows}, %a: tensor<12x8xf32> {cpc.sharding = #rows}) -> tensor<6x8xf32> {
  %dw = cpc.matmul %g, %a {cpc.shardings = [#w], transpose_lhs = true} : (tensor<12x6xf32>, tensor<12x8xf32>) -> tensor<6x8xf32>
  return %dw : tensor<6x8xf32>
}

// -----

// Tests that SUMMA finds its axes by their roles, not by their names: axes named "down" and
// "across" with the tensor_row and tensor_col roles get the same broadcasts as tp_row x tp_col.
// CHECK-LABEL: func.func @roles_not_names
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x4xf32>
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<3x4xf32>
// CHECK: cpc.broadcast_from %[[X]] over @mesh ["across"] root 0 : tensor<2x3x4xf32>
// CHECK: cpc.broadcast_from %[[W]] over @mesh ["down"] root 0 : tensor<3x4xf32>
#x = #cpc.sharding<@mesh, [["down"], [], ["across"]]>
#w = #cpc.sharding<@mesh, [["across"], ["down"]]>
cpc.mesh @mesh shape = [2, 2] axes = ["down", "across"] roles = [#cpc.axis_role<tensor_row>, #cpc.axis_role<tensor_col>]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @roles_not_names(%x: tensor<4x3x8xf32> {cpc.sharding = #x}) -> tensor<4x3x6xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %y = cpc.matmul %x, %w {cpc.shardings = [#x], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<6x8xf32>) -> tensor<4x3x6xf32>
  return %y : tensor<4x3x6xf32>
}

// -----

// Tests that axes named tp_row and tp_col without roles are plain axes: the matmul is
// partitioned by its factor rule (the weight's contracted block gathered), with no SUMMA steps.
// CHECK-LABEL: func.func @names_without_roles
// CHECK-NOT: cpc.broadcast_from
// CHECK: cpc.all_gather
// CHECK-NOT: cpc.broadcast_from
// CHECK: return
#x = #cpc.sharding<@mesh, [["tp_row"], [], ["tp_col"]]>
#w = #cpc.sharding<@mesh, [["tp_col"], ["tp_row"]]>
cpc.mesh @mesh shape = [2, 2] axes = ["tp_row", "tp_col"]
cpc.variable @w trainable : tensor<6x8xf32>
func.func @names_without_roles(%x: tensor<4x3x8xf32> {cpc.sharding = #x}) -> tensor<4x3x6xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#w]} : tensor<6x8xf32>
  %y = cpc.matmul %x, %w {cpc.shardings = [#x], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<6x8xf32>) -> tensor<4x3x6xf32>
  return %y : tensor<4x3x6xf32>
}
