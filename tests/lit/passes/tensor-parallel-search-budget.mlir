// RUN: cpc-opt %s --cpc-tensor-parallel="tp=2 search=true" | FileCheck %s
// RUN: cpc-opt %s --cpc-tensor-parallel="tp=2 search=true memory-budget=4096" | FileCheck %s --check-prefix=BUDGET
// RUN: not cpc-opt %s --cpc-tensor-parallel="tp=2 search=true memory-budget=64" 2>&1 | FileCheck %s --check-prefix=TOO-SMALL

// Tests the memory budget: without one, a weight that feeds a contraction is split and its
// contraction splits one of the weight's factors, which here costs a collective (the softmax
// needs whole rows); with a budget the weight fits, it stays whole and the matmul splits the
// rows of x instead: no collective at all. A budget the blocks cannot meet is one error.
// CHECK-LABEL: func.func @small_weight
// CHECK-SAME: collectives = 1 : i64
// CHECK: cpc.parameter @w {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}
// BUDGET-LABEL: func.func @small_weight
// BUDGET-SAME: collectives = 0 : i64
// BUDGET-SAME: variable_bytes = 256 : i64
// BUDGET: cpc.parameter @w : tensor<8x8xf32>
// BUDGET: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]
// TOO-SMALL: error: the parameters and optimizer states need 128 bytes per rank at least, split over tp=2; the budget is 64 bytes
cpc.variable @w trainable : tensor<8x8xf32>
func.func @small_weight(%x: tensor<1024x8xf32>) -> tensor<1024x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w = cpc.parameter @w : tensor<8x8xf32>
  %y = cpc.matmul %x, %w : (tensor<1024x8xf32>, tensor<8x8xf32>) -> tensor<1024x8xf32>
  %p = cpc.softmax %y {axis = 1 : i64} : tensor<1024x8xf32>
  return %p : tensor<1024x8xf32>
}
