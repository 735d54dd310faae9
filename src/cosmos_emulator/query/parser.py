"""Recursive-descent parser for the supported subset; anything else is a named 400."""

from __future__ import annotations

from ..errors import bad_request, unsupported
from .ast import (
    ArrayLit,
    Between,
    Binary,
    Call,
    Expr,
    In,
    Literal,
    Member,
    ObjectLit,
    OrderItem,
    Param,
    Query,
    Ref,
    Selection,
    SelectItem,
    SelectList,
    SelectStar,
    SelectValue,
    Unary,
)
from .lexer import Token, tokenize
from .values import UNDEFINED

_COMPARISONS = ("=", "!=", "<>", "<", "<=", ">", ">=")


def parse_query(text: str) -> Query:
    return _Parser(tokenize(text)).query()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    # -- token helpers -------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _is(self, kind: str, value: object = None) -> bool:
        tok = self.tok
        return tok.kind == kind and (value is None or tok.value == value)

    def _kw(self, word: str) -> bool:
        return self._is("KW", word)

    def _punct(self, text: str) -> bool:
        return self._is("PUNCT", text)

    def _advance(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def _expect_kw(self, word: str) -> None:
        if not self._kw(word):
            self._error(f"expected {word}")
        self._advance()

    def _expect_punct(self, text: str) -> None:
        if not self._punct(text):
            self._error(f"expected '{text}'")
        self._advance()

    def _error(self, what: str) -> None:
        near = self.tok.text or "end of query"
        raise bad_request(f"Syntax error, {what} near '{near}' at position {self.tok.pos}.")

    def _refuse_unsupported_keyword(self) -> None:
        if self.tok.kind != "KW":
            return
        names = {
            "JOIN": "JOIN",
            "GROUP": "GROUP BY",
            "EXISTS": "EXISTS subqueries",
            "ARRAY": "ARRAY subqueries",
            "LIKE": "LIKE",
            "HAVING": "HAVING",
        }
        word = str(self.tok.value)
        if word in names:
            raise unsupported(names[word])

    # -- query -----------------------------------------------------------------------------
    def query(self) -> Query:
        self._expect_kw("SELECT")
        distinct = False
        top: Expr | None = None
        if self._kw("DISTINCT"):
            self._advance()
            distinct = True
        if self._kw("TOP"):
            self._advance()
            top = self._count_operand("TOP")
        select = self._selection()
        self._expect_kw("FROM")
        alias = self._from_clause()
        where: Expr | None = None
        self._refuse_unsupported_keyword()
        if self._kw("WHERE"):
            self._advance()
            where = self.expr()
        self._refuse_unsupported_keyword()
        order_by: list[OrderItem] = []
        if self._kw("ORDER"):
            self._advance()
            self._expect_kw("BY")
            while True:
                expr = self.expr()
                descending = False
                if self._kw("ASC") or self._kw("DESC"):
                    descending = self._advance().value == "DESC"
                order_by.append(OrderItem(expr, descending))
                if not self._punct(","):
                    break
                self._advance()
        offset: Expr | None = None
        limit: Expr | None = None
        if self._kw("OFFSET"):
            self._advance()
            offset = self._count_operand("OFFSET")
            self._expect_kw("LIMIT")
            limit = self._count_operand("LIMIT")
        self._refuse_unsupported_keyword()
        if not self._is("EOF"):
            self._error("unexpected token")
        if top is not None and offset is not None:
            raise bad_request("TOP and OFFSET LIMIT cannot be used in the same query.")
        return Query(select, alias, distinct, top, where, tuple(order_by), offset, limit)

    def _count_operand(self, clause: str) -> Expr:
        if self._is("NUM"):
            value = self._advance().value
            if not isinstance(value, int) or value < 0:
                raise bad_request(f"{clause} requires a non-negative integer.")
            return Literal(value)
        if self._is("PARAM"):
            return Param(str(self._advance().value))
        self._error(f"{clause} expects a number or a parameter")
        raise AssertionError  # pragma: no cover

    def _selection(self) -> Selection:
        if self._punct("*"):
            self._advance()
            return SelectStar()
        if self._kw("VALUE"):
            self._advance()
            return SelectValue(self.expr())
        items: list[SelectItem] = []
        while True:
            expr = self.expr()
            alias: str | None = None
            if self._kw("AS"):
                self._advance()
                alias = self._identifier()
            elif self._is("IDENT"):
                alias = self._identifier()
            items.append(SelectItem(expr, alias))
            if not self._punct(","):
                break
            self._advance()
        return SelectList(tuple(items))

    def _identifier(self) -> str:
        if not self._is("IDENT"):
            self._error("expected an identifier")
        return self._advance().text

    def _from_clause(self) -> str:
        if self._punct("("):
            raise unsupported("subqueries in FROM")
        name = self._identifier()
        if self._kw("IN"):
            raise unsupported("FROM ... IN iteration")
        if self._punct(".") or self._punct("["):
            raise unsupported("FROM on a sub-path")
        alias = name
        if self._kw("AS"):
            self._advance()
            alias = self._identifier()
        elif self._is("IDENT"):
            alias = self._identifier()
        if self._kw("IN"):
            raise unsupported("FROM ... IN iteration")
        return alias

    # -- expressions ---------------------------------------------------------------------
    def expr(self) -> Expr:
        if self._punct("?") or self._punct("??"):
            self._error("unexpected operator")
        left = self._or()
        if self._punct("?") or self._punct("??"):
            raise unsupported(f"the '{self.tok.text}' operator")
        return left

    def _or(self) -> Expr:
        left = self._and()
        while self._kw("OR"):
            self._advance()
            left = Binary("OR", left, self._and())
        return left

    def _and(self) -> Expr:
        left = self._not()
        while self._kw("AND"):
            self._advance()
            left = Binary("AND", left, self._not())
        return left

    def _not(self) -> Expr:
        if self._kw("NOT"):
            self._advance()
            return Unary("NOT", self._not())
        return self._comparison()

    def _comparison(self) -> Expr:
        left = self._additive()
        while True:
            if self.tok.kind == "PUNCT" and self.tok.value in _COMPARISONS:
                op = str(self._advance().value)
                left = Binary("!=" if op == "<>" else op, left, self._additive())
                continue
            negated = False
            if self._kw("NOT") and self.tokens[self.i + 1].value in ("IN", "BETWEEN", "LIKE"):
                self._advance()
                negated = True
            if self._kw("IN"):
                self._advance()
                self._expect_punct("(")
                items = [self.expr()]
                while self._punct(","):
                    self._advance()
                    items.append(self.expr())
                self._expect_punct(")")
                left = In(left, tuple(items), negated)
                continue
            if self._kw("BETWEEN"):
                self._advance()
                low = self._additive()
                self._expect_kw("AND")
                high = self._additive()
                left = Between(left, low, high, negated)
                continue
            self._refuse_unsupported_keyword()
            return left

    def _additive(self) -> Expr:
        left = self._multiplicative()
        while self.tok.kind == "PUNCT" and self.tok.value in ("+", "-", "||"):
            op = str(self._advance().value)
            left = Binary(op, left, self._multiplicative())
        return left

    def _multiplicative(self) -> Expr:
        left = self._unary()
        while self.tok.kind == "PUNCT" and self.tok.value in ("*", "/", "%"):
            op = str(self._advance().value)
            left = Binary(op, left, self._unary())
        return left

    def _unary(self) -> Expr:
        if self._punct("-"):
            self._advance()
            operand = self._unary()
            if isinstance(operand, Literal) and isinstance(operand.value, int | float):
                return Literal(-operand.value)
            return Unary("-", operand)
        if self._punct("+"):
            self._advance()
            return self._unary()
        return self._postfix(self._primary())

    def _postfix(self, expr: Expr) -> Expr:
        while True:
            if self._punct("."):
                self._advance()
                if self.tok.kind not in ("IDENT", "KW"):
                    self._error("expected a property name")
                expr = Member(expr, self._advance().text)
            elif self._punct("["):
                self._advance()
                if self._is("STR"):
                    key: str | int = str(self._advance().value)
                elif self._is("NUM") and isinstance(self.tok.value, int):
                    key = int(self.tok.value)  # type: ignore[arg-type]
                    self._advance()
                else:
                    raise unsupported("computed property access (only literal keys)")
                self._expect_punct("]")
                expr = Member(expr, key)
            else:
                return expr

    def _primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "NUM" or tok.kind == "STR":
            self._advance()
            return Literal(tok.value)
        if tok.kind == "PARAM":
            self._advance()
            return Param(str(tok.value))
        if tok.kind == "KW":
            constants = {"TRUE": True, "FALSE": False, "NULL": None, "UNDEFINED": UNDEFINED}
            if tok.value in constants:
                self._advance()
                return Literal(constants[str(tok.value)])
            self._refuse_unsupported_keyword()
            self._error("unexpected keyword")
        if tok.kind == "IDENT":
            self._advance()
            if tok.text.lower() == "udf" and self._punct("."):
                raise unsupported("user-defined functions (udf.*)")
            if self._punct("("):
                return self._call(tok.text)
            return Ref(tok.text)
        if self._punct("("):
            self._advance()
            if self._kw("SELECT"):
                raise unsupported("subqueries")
            inner = self.expr()
            self._expect_punct(")")
            return inner
        if self._punct("["):
            self._advance()
            items: list[Expr] = []
            if not self._punct("]"):
                items.append(self.expr())
                while self._punct(","):
                    self._advance()
                    items.append(self.expr())
            self._expect_punct("]")
            return ArrayLit(tuple(items))
        if self._punct("{"):
            self._advance()
            pairs: list[tuple[str, Expr]] = []
            if not self._punct("}"):
                while True:
                    key = str(self._advance().value) if self._is("STR") else self._identifier()
                    self._expect_punct(":")
                    pairs.append((key, self.expr()))
                    if not self._punct(","):
                        break
                    self._advance()
            self._expect_punct("}")
            return ObjectLit(tuple(pairs))
        self._error("unexpected token")
        raise AssertionError  # pragma: no cover

    def _call(self, name: str) -> Expr:
        self._expect_punct("(")
        upper = name.upper()
        if upper in ("UDF",) or name.lower().startswith("udf."):
            raise unsupported("user-defined functions")
        args: list[Expr] = []
        if not self._punct(")"):
            if self._kw("SELECT"):
                raise unsupported("subqueries")
            args.append(self.expr())
            while self._punct(","):
                self._advance()
                args.append(self.expr())
        self._expect_punct(")")
        return Call(upper, tuple(args))
