// RUN: cpc-opt %s --cpc-tensor-parallel="tp=2 shard=fc2\.bias=tp,fc1\.weight=-:-" | FileCheck %s
// RUN: not cpc-opt %s --cpc-tensor-parallel="tp=2 shard=fc1\.weight=tp" 2>&1 | FileCheck %s --check-prefix=BAD

// Tests that --shard entries (REGEX=SPEC, dims separated by ':' in a pass option) override the
// Megatron choice by name at priority 0: fc1's weight is kept whole, fc2's bias split.
// CHECK-LABEL: func.func @mlp
// CHECK: cpc.parameter @fc1.weight {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []]>]} : tensor<16x8xf32>
// CHECK: cpc.parameter @fc1.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"]], priority = 1>]}
// CHECK: cpc.parameter @fc2.bias {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"]]>]} : tensor<8xf32>
// Tests that a spec with the wrong number of dims is one clear error naming the parameter.
// BAD: error: --shard 'fc1\.weight=tp' for 'fc1.weight': the spec has 1 entries for a parameter of rank 2
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
cpc.variable @fc1.bias trainable : tensor<16xf32>
cpc.variable @fc2.weight trainable : tensor<8x16xf32>
cpc.variable @fc2.bias trainable : tensor<8xf32>
func.func @mlp(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %b1 = cpc.parameter @fc1.bias : tensor<16xf32>
  %w2 = cpc.parameter @fc2.weight : tensor<8x16xf32>
  %b2 = cpc.parameter @fc2.bias : tensor<8xf32>
  %h = cpc.matmul %x, %w1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %hb = cpc.add %b1, %h : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %a = cpc.gelu %hb : tensor<4x16xf32>
  %y = cpc.matmul %a, %w2 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %yb = cpc.add %b2, %y : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %yb : tensor<4x8xf32>
}
